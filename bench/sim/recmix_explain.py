"""What bounds a ``rec-mix`` run's makespan, and where its tail comes from.

``summarize`` turns what ``run_recmix(detail=...)`` recorded into plain numbers (kept with the
run in ``runs.jsonl``); ``explain_markdown`` prints them for a batch.

Lower bounds on the makespan of a run (seconds; each holds for any placement of these jobs
under bench/sim/physics.py, whatever the queue order, as every job runs at least its solo
time and holds what it booked meanwhile):

* ``longest``: the longest job's solo time;
* ``arrival``: the latest any job arrives plus its solo time (continuous mode: the arrivals
  alone span the exclusive scheduler's ideal makespan at offered load 1);
* ``sm_work``: the jobs' SM-seconds (solo time x SM activity) over the GPUs: a GPU delivers at
  most one SM-second per second;
* ``booked_compute``: booked milli-GPU-seconds (a whole GPU = 1000) over 1000 x GPUs: the
  ledger never books more than 1000 milli on a GPU;
* ``booked_memory``: booked GPU-memory-seconds over the GPUs' memory;
* ``host_cpu`` / ``host_memory``: the trace pods' CPU / memory requests x solo time over the
  nodes' (kube-scheduler's fit filter is the same for every policy);
* ``order_free``: the largest of these.

From the run itself: ``last_start_plus_solo`` (the latest any job started, its last attempt,
plus its solo time: the makespan cannot be shorter, given when jobs got a GPU) and
``backlog_end`` (when the last waiting job got a place; after it the cluster only drains).

With the SM-seconds the same for every policy (OOM retries add the lost progress),
SM-weighted utilisation / kube-exclusive's = kube-exclusive's makespan / the run's x the
ratio of delivered SM-seconds, so 2x the utilisation needs about half the makespan.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.sim.recmix import GPU_MEM_MIB

TAIL = 3  # last jobs to finish listed per run
BOUNDS = ("longest", "arrival", "sm_work", "booked_compute", "booked_memory", "host_cpu",
          "host_memory")


def summarize(d: dict) -> dict:
    """Plain numbers (JSON-ready) from a run's ``detail``."""
    jobs: pd.DataFrame = d["jobs"]
    work = np.asarray(d["work"], dtype=np.float64)
    g = int(d["gpus"])
    milli = np.asarray(d["milli"], dtype=np.float64)
    compute = np.where(milli > 0, milli, 1000.0)  # 0 = a whole GPU
    sm = jobs["sm"].to_numpy(dtype=np.float64)
    arrive = np.asarray(d["arrive"], dtype=np.float64)
    t0 = float(arrive.min())
    bounds = {
        "longest": float(work.max()),
        "arrival": float((arrive + work).max() - t0),
        "sm_work": float(sm @ work / g),
        "booked_compute": float(compute @ work / (1000.0 * g)),
        "booked_memory": float(np.asarray(d["mem"], dtype=np.float64) @ work
                               / (GPU_MEM_MIB * g)),
        "host_cpu": float(jobs["cpu_milli"].to_numpy(float) @ work / d["node_cpu"].sum()),
        "host_memory": float(jobs["host_mem_mib"].to_numpy(float) @ work
                             / d["node_mem"].sum()),
    }
    bounds["order_free"] = max(bounds.values())
    done = np.asarray(d["done"], dtype=np.float64)
    run_start = np.asarray(d["run_start"], dtype=np.float64)
    first = np.asarray(d["first_start"], dtype=np.float64)
    stretch = (done - run_start) / work
    # queue order: by rank (band; 0 for all in FIFO), then index (submission order)
    rank = np.asarray(d.get("rank", np.zeros(len(work))), dtype=np.float64)
    pos = np.empty(len(work), dtype=np.int64)
    pos[np.lexsort((np.arange(len(work)), rank))] = np.arange(len(work))
    tail = []
    for j in np.argsort(-done, kind="stable")[:TAIL]:
        co = sorted(d["corunners"][j])
        ahead = first[pos < pos[j]]  # jobs queued before it
        tail.append({
            "head_s": float(np.nanmax(ahead) - t0) if len(ahead) else float(first[j] - t0),
            "overtaken": int((first[pos > pos[j]] < first[j]).sum()),
            "job": int(j), "family": str(jobs["family"].iat[j]), "solo_s": float(work[j]),
            "arrive_s": float(arrive[j] - t0), "start_s": float(first[j] - t0),
            "done_s": float(done[j] - t0), "stretch": float(stretch[j]),
            "milli": int(milli[j]), "sm": float(sm[j]), "co_runners": len(co),
            "co_sm_mean": float(sm[co].mean()) if co else 0.0,
            "co_long": int(sum(work[k] >= 0.5 * work[j] for k in co)),
        })
    attempts = sum(d["blocked"].values())
    backlog = max(float(d["backlog_time"]), 1e-9)
    return {
        "bounds": bounds,
        "last_start_plus_solo": float(np.nanmax(run_start + work) - t0),
        "backlog_end": float(np.nanmax(first) - t0),
        "sm_seconds": float(d["sm_area"]),
        "jobs_per_busy_gpu": d["jobs_area"] / max(d["busy_area"], 1e-9),
        "jobs_per_busy_gpu_backlog": (d["backlog_jobs"] / d["backlog_busy"]
                                      if d["backlog_busy"] else float("nan")),
        "booked_while_waiting": {k: v / backlog for k, v in d["backlog_used"].items()},
        "blocked": {k: v / attempts for k, v in sorted(d["blocked"].items(),
                                                         key=lambda kv: -kv[1])},
        "tail": tail,
    }


EXCLUSIVE = "kube-exclusive"
BASE_MODES = ("high-load", "continuous")


def baseline_mode(mode: str) -> str:
    """The mode whose baseline rows a run of ``mode`` is compared with: the plain arrival mode
    (``high-load-bands`` -> ``high-load``: the stock schedulers as they queue, FIFO), except
    for the oracle's ``*-longest-first``, compared within itself."""
    if mode.endswith("-longest-first"):
        return mode
    return next((m for m in BASE_MODES if mode.startswith(m)), mode)


def _fmt(x: float) -> str:
    return f"{x:,.0f}"


def explain_markdown(runs: list) -> list[str]:
    """Markdown lines: per mode and seed, each policy's makespan against its bounds, what its
    GPUs held while jobs waited and why jobs waited, and the jobs that finished last."""
    have = [r for r in runs if getattr(r, "explain", None)]
    if not have:
        return []
    lines = ["## What bounds the makespan", "",
             "Per run (seconds). Bounds (bench/sim/recmix_explain.py): `longest` solo job, "
             "`arrival` (latest arrival plus its solo time), "
             "`sm_work` (SM-seconds / GPUs), `booked_compute` (booked milli-GPU-seconds / "
             "GPUs), `booked_memory`, `host_cpu`, `host_memory`; `order_free` is the largest. "
             "`last+solo`: latest start of any job plus its solo time. `backlog_end`: when the "
             "last waiting job got a place. `target`: half kube-exclusive's makespan of the "
             "same seed. SM-weighted utilisation / kube-exclusive's = kube-exclusive's makespan "
             "/ the run's x the ratio of `SM-s delivered` (equal when no job ran out of "
             "memory), so 2x the utilisation needs `makespan <= target`; a bound above "
             "`target` rules it out for that run (modes `*-fifo`, `*-bands*` use the plain "
             "mode's: the stock scheduler, FIFO). Modes `*-longest-first` queue the same jobs "
             "longest first (an oracle): what is left when the queue order no longer puts a "
             "long job last.", ""]
    head = ["mode", "seed", "policy", "makespan", "target", *BOUNDS, "order_free", "last+solo",
            "backlog_end", "jobs/GPU", "jobs/GPU waiting", "SM-s delivered"]
    rows = []
    for r in sorted(have, key=lambda r: (r.mode, r.seed, r.policy)):
        e = r.explain
        ex = [x for x in have if x.mode == baseline_mode(r.mode) and x.seed == r.seed
              and x.policy == EXCLUSIVE]
        target = 0.5 * ex[0].makespan if ex else float("nan")
        rows.append([r.mode, str(r.seed), r.policy, _fmt(r.makespan), _fmt(target),
                     *(_fmt(e["bounds"][b]) for b in BOUNDS), _fmt(e["bounds"]["order_free"]),
                     _fmt(e["last_start_plus_solo"]), _fmt(e["backlog_end"]),
                     f"{e['jobs_per_busy_gpu']:.2f}", f"{e['jobs_per_busy_gpu_backlog']:.2f}",
                     f"{e['sm_seconds']:.4g}"])
    lines += _table(head, rows)
    lines += ["", "While jobs waited: booked share of the cluster's resources (time-averaged) "
              "and why placements failed (share of failed attempts: no GPU with enough free "
              "compute share, memory, both on one GPU, or no node with host room).", ""]
    rows = []
    for r in sorted(have, key=lambda r: (r.mode, r.seed, r.policy)):
        e = r.explain
        booked = ", ".join(f"{k} {100 * v:.0f}%" for k, v in e["booked_while_waiting"].items())
        why = ", ".join(f"{k} {100 * v:.0f}%" for k, v in e["blocked"].items())
        rows.append([r.mode, str(r.seed), r.policy, booked or "-", why or "-"])
    lines += _table(["mode", "seed", "policy", "booked while waiting", "failed placements"],
                    rows)
    lines += ["", f"The {TAIL} jobs that finished last (times from the first arrival; "
              "`ahead started`: when every job queued before it had started, so a start near "
              "it means the job waited for its turn rather than for room; `overtaken`: jobs "
              "queued after it that started first; `co`: jobs that shared its GPU at some "
              "point, their mean SM activity, and how many of them ran at least half as "
              "long).", ""]
    rows = []
    for r in sorted(have, key=lambda r: (r.mode, r.seed, r.policy)):
        for t in r.explain["tail"]:
            head = t.get("head_s", float("nan"))
            rows.append([r.mode, str(r.seed), r.policy, str(t["job"]), t["family"],
                         _fmt(t["solo_s"]), _fmt(t["arrive_s"]), _fmt(t["start_s"]),
                         _fmt(head), str(t.get("overtaken", "")),
                         _fmt(t["done_s"]), f"{t['stretch']:.2f}", str(t["milli"]),
                         f"{t['sm']:.2f}", f"{t['co_runners']} / {t['co_sm_mean']:.2f} / "
                         f"{t['co_long']}"])
    lines += _table(["mode", "seed", "policy", "job (queue pos.)", "family", "solo", "arrive",
                     "start", "ahead started", "overtaken", "done", "stretch", "milli", "SM",
                     "co: n / SM / long"], rows)
    return lines + [""]


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(r) + " |" for r in rows)]
