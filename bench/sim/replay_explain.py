"""What sets a ``replay`` run's makespan and JCT, per seed, and why one policy lost time to another.

``WaitLog`` rides along the replay's event loop (the same for every policy): while jobs wait it
integrates what the GPUs hold (idle whole GPUs, free slivers beside shares) and counts failed
placement attempts by the waiting job's kind. ``summarize`` turns it and the run's times into
plain numbers (kept with the run in ``runs.jsonl``); ``explain_markdown`` prints, per mode and
seed, each policy's figures and, for ``sparse`` against the other sharing policies, the reason
its makespan and mean JCT differ:

* ``tail``: the makespan is the last job's start plus its run time. A later start of that job
  is queueing (``waited``: for its turn in the FIFO, or for room after its turn came, e.g. a
  multi-GPU job waiting for enough free GPUs on one node while smaller jobs overtake it); a
  longer run is interference (its stretch).
* ``interference``: GPU-seconds the sharing jobs lost to co-runners (run time - solo time, x
  their share of the GPU): capacity no later job could use.
* ``idle while waiting``: whole GPUs free, and free share capacity beside shares (slivers),
  time-averaged while jobs waited: capacity the placement left unusable for the queue.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from bench.sim.queueing import base_mode

TAIL = 1  # last jobs described per run
SHARING = ("kube-shared", "fgd")  # the sharing baselines sparse is compared with


def kind(num_gpu: int, milli: int) -> str:
    if num_gpu == 1 and milli < 1000:
        return "share"
    return "1 GPU" if num_gpu == 1 else f"{num_gpu} GPUs"


class WaitLog:
    """Time integrals while the queue is not empty, and failed attempts by job kind."""

    def __init__(self, sim: object) -> None:
        self.sim = sim
        self.backlog_s = 0.0
        self.idle_gpu_s = 0.0  # whole free GPUs x seconds
        self.sliver_gpu_s = 0.0  # free milli on partly booked GPUs / 1000 x seconds
        self.waiting: Counter = Counter()  # kind -> job-seconds waited
        # while a share or one-GPU job waited: whole GPUs idle, and the time
        self.small_idle_gpu_s = 0.0
        self.small_s = 0.0
        self.fails: Counter = Counter()  # kind -> failed attempts

    def advance(self, dt: float, pending: list[int], shapes: list) -> None:
        if dt <= 0 or not pending:
            return
        st = self.sim.state  # type: ignore[attr-defined]
        used = st.milli_used
        free = st.milli_cap - used
        self.backlog_s += dt
        self.idle_gpu_s += dt * float((used == 0).sum())
        self.sliver_gpu_s += dt * float(free[used > 0].sum()) / 1000.0
        small = False
        for j in pending:
            self.waiting[kind(shapes[j][0], shapes[j][1])] += dt
            small = small or shapes[j][0] == 1
        if small:
            self.small_s += dt
            self.small_idle_gpu_s += dt * float((used == 0).sum())

    def failed(self, shape: tuple) -> None:
        self.fails[kind(shape[0], shape[1])] += 1


def summarize(log: WaitLog, *, shapes: list, work: np.ndarray, arrive: np.ndarray,
              started: np.ndarray, done: np.ndarray, n_gpus: int,
              rank: np.ndarray | None = None) -> dict:
    """Plain numbers (JSON-ready) for one run. ``rank``: each job's place in the queue (lower
    first, equal ranks in submission order; None: FIFO)."""
    t0 = float(arrive.min())
    num = np.array([s[0] for s in shapes])
    milli = np.array([s[1] for s in shapes])
    shared = (num == 1) & (milli < 1000)
    booked = np.where(shared, milli / 1000.0, num)
    run = done - started
    lost = float(((run - work) * booked)[shared].sum())
    n = len(work)
    tail = []
    rank = np.zeros(n, dtype=np.int64) if rank is None else np.asarray(rank)
    index = np.arange(n)
    for j in np.argsort(-done, kind="stable")[:TAIL]:
        # the jobs queued before it: a better rank, or the same and submitted earlier, and
        # there by the time it started
        before = ((rank < rank[j]) | ((rank == rank[j]) & (index < j))) \
            & (arrive <= started[j])
        ahead = started[before]
        turn = max(float(np.nanmax(ahead)) if len(ahead) else t0, float(arrive[j]))
        tail.append({
            "job": int(j), "kind": kind(int(num[j]), int(milli[j])), "solo_s": float(work[j]),
            "arrive_s": float(arrive[j] - t0), "start_s": float(started[j] - t0),
            "turn_s": min(turn, float(started[j])) - t0,
            # jobs behind it in the queue that started while it waited
            "overtaken": int(((~before) & (index != j) & (started >= arrive[j])
                              & (started < started[j])).sum()),
            "run_s": float(run[j]), "stretch": float(run[j] / work[j]),
        })
    backlog = max(log.backlog_s, 1e-9)
    sim = log.sim
    return {
        "node_choice": sim.with_choice / max(sim.placements, 1),  # type: ignore[attr-defined]
        "bounds": {"longest": float(work.max()),
                   "booked_work": float(booked @ work) / n_gpus},
        "last_start_plus_solo": float(np.nanmax(started + work) - t0),
        # the last share or one-GPU job to start: after it only multi-GPU jobs wait
        "small_end": float(np.nanmax(np.where(num == 1, started, np.nan)) - t0)
        if (num == 1).any() and np.isfinite(started[num == 1]).any() else float("nan"),
        "backlog_end": float(np.nanmax(started) - t0),
        "interference_gpu_s": lost,
        "interference_gpus": lost / max(float(np.nanmax(done) - t0), 1e-9),
        "idle_gpus_waiting": log.idle_gpu_s / backlog,
        "sliver_gpus_waiting": log.sliver_gpu_s / backlog,
        "backlog_s": log.backlog_s,
        "small_backlog_s": log.small_s,
        "idle_gpus_small_waiting": log.small_idle_gpu_s / max(log.small_s, 1e-9),
        "wait_s_by_kind": {k: v / n for k, v in sorted(log.waiting.items())},
        "fails_by_kind": dict(sorted(log.fails.items())),
        "tail": tail,
    }


def _fmt(x: float) -> str:
    return f"{x:,.0f}"


def reason(mine: object, other: object) -> str:
    """Why ``mine``'s makespan differs from ``other``'s (same seed and mode), in words."""
    a, b = mine.explain, other.explain  # type: ignore[attr-defined]
    ta, tb = a["tail"][0], b["tail"][0]
    d = mine.makespan - other.makespan  # type: ignore[attr-defined]
    parts = [f"makespan {d:+,.0f} s: last job {ta['kind']} ({_fmt(ta['solo_s'])} s solo) "
             f"started {_fmt(ta['start_s'])} vs {_fmt(tb['start_s'])} ({tb['kind']}), "
             f"ran {_fmt(ta['run_s'])} vs {_fmt(tb['run_s'])}"]
    if ta["start_s"] - ta["turn_s"] > 60:
        parts.append(f"it waited {_fmt(ta['start_s'] - ta['turn_s'])} s for room after its "
                     f"turn, {ta['overtaken']} jobs overtook it")
    parts.append(f"interference {a['interference_gpus']:.2f} vs {b['interference_gpus']:.2f} "
                 f"GPUs lost; idle while waiting {a['idle_gpus_waiting']:.2f} + slivers "
                 f"{a['sliver_gpus_waiting']:.2f} vs {b['idle_gpus_waiting']:.2f} + "
                 f"{b['sliver_gpus_waiting']:.2f} GPUs")
    if "node_holds" in a:
        h = a["node_holds"]
        parts.append(f"{h['gangs']} gangs held a node, {h['refused']} placements kept off "
                     "held nodes")
    dj = mine.jct_mean - other.jct_mean  # type: ignore[attr-defined]
    parts.append(f"mean JCT {dj:+,.0f} s")
    return "; ".join(parts)


def explain_markdown(runs: list, policy: str = "sparse") -> list[str]:
    """Markdown: per mode and seed, each policy's figures; then ``policy`` against each
    sharing baseline with the reason."""
    have = [r for r in runs if getattr(r, "explain", None)]
    if not have:
        return []
    lines = ["## Where the time went, per seed", "",
             "`node choice`: share of the GPU pods placed that had more than one node to "
             "choose from (the rest went to the only node with room: no policy could do "
             "otherwise); `small end`: when the last share or one-GPU job started (after it "
             "only multi-GPU jobs wait, for nodes to drain); `backlog end`: when the "
             "last waiting job started; `interference`: GPUs' worth of work lost to "
             "co-runners over the makespan; `idle` / `slivers`: whole free GPUs / free share "
             "capacity beside shares while jobs waited (time-averaged, GPUs; a job no node "
             "can host waits to the end); `idle (small waiting)`: whole free GPUs while a "
             "share or one-GPU job waited; `wait by kind`: "
             "job-seconds waited per job, by the waiting job's kind; `last job`: kind, solo "
             "time, start, the time its turn came (every job before it had started), jobs "
             "that overtook it, stretch (bench/sim/replay_explain.py).", ""]
    head = ["mode", "seed", "policy", "makespan", "jct mean", "node choice", "small end",
            "backlog end", "interference", "idle", "idle (small waiting)", "slivers",
            "wait by kind", "last job"]
    rows = []
    for r in sorted(have, key=lambda r: (r.mode, r.seed, r.policy)):
        e = r.explain
        t = e["tail"][0]
        wait = ", ".join(f"{k} {_fmt(v)}" for k, v in e["wait_s_by_kind"].items())
        rows.append([r.mode, str(r.seed), r.policy, _fmt(r.makespan), _fmt(r.jct_mean),
                     f"{100 * e.get('node_choice', float('nan')):.0f}%",
                     _fmt(e.get("small_end", float("nan"))), _fmt(e["backlog_end"]),
                     f"{e['interference_gpus']:.2f}", f"{e['idle_gpus_waiting']:.2f}",
                     f"{e.get('idle_gpus_small_waiting', float('nan')):.2f}",
                     f"{e['sliver_gpus_waiting']:.2f}", wait or "-",
                     f"{t['kind']} {_fmt(t['solo_s'])} s, start {_fmt(t['start_s'])}, turn "
                     f"{_fmt(t['turn_s'])}, {t['overtaken']} overtook, x{t['stretch']:.2f}"])
    lines += _table(head, rows)
    lines += ["", f"### {policy} against the sharing baselines", ""]
    rows = []
    for r in sorted(have, key=lambda r: (r.mode, r.seed)):
        if r.policy != policy:
            continue
        for base in SHARING:
            o = [x for x in have if (x.mode, x.seed, x.workload, x.policy)
                 == (r.mode, r.seed, r.workload, base)] or [
                x for x in have if (x.mode, x.seed, x.workload, x.policy)
                == (base_mode(r.mode), r.seed, r.workload, base)]
            if o:
                against = base if o[0].mode == r.mode else f"{base} ({o[0].mode})"
                rows.append([r.mode, str(r.seed), against, reason(r, o[0])])
    lines += _table(["mode", "seed", "against", "reason"], rows)
    return lines + [""]


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(r) + " |" for r in rows)]
