"""Measure co-located pairs of the predictor's model families on one GPU (run by hack/gpu-pairs.sh).

For each family of the predictor's GPU dataset (taken from the data, none listed here) one
config is picked: the row with the median SM activity among rows that fit in ``MAX_MIB`` and
run at least ``MIN_STEPS_S`` steps/s. Each config runs in its own long-lived worker process
(model built once, warmed up), driven over a pipe: ``run SECONDS`` trains for that long and
answers with its step count and time. Two sharing modes, in turn:

* ``timeslice``: plain CUDA time-slicing, the default when two processes share a GPU;
* ``mps``: an MPS daemon, each worker started with its limits
  (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` from the config's solo SM activity x ``MPS_HEADROOM``,
  at least 10; ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` at 1.5x its solo memory).

Per mode: every worker alone (its solo step time and profile: NVML GPU and memory-controller
utilisation, process memory, GPM SM activity and DRAM bandwidth where the GPU has GPM), then
every unordered pair of families (self-pairs included) at the same time. One row per ordered
pair: ``a_speed`` = A's solo step time / A's step time next to B, with A's and B's solo
profiles in the columns ``sparse-bench interference evaluate --pairs`` reads. Rows are written
as they come to ``--out`` and the whole table is printed at the end. A time budget stops
starting new pairs when spent.

Needs torch and pynvml on the GPU machine, nothing else beyond the standard library.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from itertools import combinations_with_replacement
from pathlib import Path

DATASET = Path(__file__).resolve().parents[2] / "predictor" / "data" / "dataset-gpu-h200.csv"
MAX_MIB = 12_000
MIN_STEPS_S = 5.0
MPS_HEADROOM = 1.5
SAMPLE_S = 0.1
DEVICE = os.environ.get("SPARSE_PAIRS_DEVICE", "cuda")  # "cpu" only to try the protocol
COLUMNS = ("mode", "job_a", "job_b", "a_gpu_util", "a_mem_util", "a_mem_mib", "b_gpu_util",
           "b_mem_util", "b_mem_mib", "a_speed", "a_solo_step_s", "a_pair_step_s",
           "a_sm_active_pct", "b_sm_active_pct", "a_dram_bw_pct", "b_dram_bw_pct", "gpu")


# --- the worker process -------------------------------------------------------------------

def worker_main(cfg: dict) -> None:
    import torch

    from predictor.generate import models

    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
    with torch.device(DEVICE):
        model, make_batch, loss_fn = models.build(cfg, dtypes[cfg["dtype"]])
        opt = models.make_optimizer(cfg["optimizer"], model)
        batch = make_batch()

    def step() -> None:
        loss_fn(model, batch).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(5):
        step()
    sync()
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        seconds = float(cmd[1])
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            step()
            steps += 1
            if steps % 5 == 0:
                sync()
        sync()
        elapsed = time.perf_counter() - t0
        print(json.dumps({"steps": steps, "elapsed": elapsed}), flush=True)


class Worker:
    def __init__(self, name: str, cfg: dict, env: dict[str, str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.interference.gpupairs", "--worker", json.dumps(cfg)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, **env})
        self.pid = 0

    def wait_ready(self) -> Worker:
        self.pid = json.loads(self._line())["ready"]
        return self

    def _line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} exited (code {self.proc.poll()})")
        return line

    def start(self, seconds: float) -> None:
        self.proc.stdin.write(f"run {seconds}\n")
        self.proc.stdin.flush()

    def result(self) -> float:
        """Mean step time of the last run."""
        doc = json.loads(self._line())
        return doc["elapsed"] / max(doc["steps"], 1)

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


# --- profiles -----------------------------------------------------------------------------

class Profiler(threading.Thread):
    """NVML at 10 Hz while one worker runs alone: device GPU / memory-controller utilisation,
    the worker's memory, and GPM SM activity / DRAM bandwidth (the predictor's sampler)."""

    def __init__(self, handle, pid: int) -> None:  # noqa: ANN001 - NVML handle
        super().__init__(daemon=True)
        from predictor.generate.gpu import _Sampler

        self.h = handle
        self.stop = threading.Event()
        self.mem_util: list[float] = []
        self.gpm = _Sampler(handle, pid)

    def run(self) -> None:
        import pynvml

        self.gpm.start()
        while not self.stop.wait(SAMPLE_S):
            with contextlib.suppress(pynvml.NVMLError):
                self.mem_util.append(float(pynvml.nvmlDeviceGetUtilizationRates(self.h).memory))
        self.gpm.stop.set()
        self.gpm.join()

    def profile(self) -> dict:
        def mean(xs: list[float]) -> float | str:
            return round(sum(xs) / len(xs), 3) if xs else ""

        s = self.gpm
        return {"gpu_util": mean(s.util), "mem_util": mean(self.mem_util),
                "mem_mib": round(max(s.proc_used) / 2**20) if s.proc_used else "",
                "sm_active_pct": mean(s.gpm["gpu_sm_active_pct"] or s.smutil),
                "dram_bw_pct": mean(s.gpm["gpu_dram_bw_pct"])}


# --- the run ------------------------------------------------------------------------------

def pick_configs(path: Path = DATASET) -> dict[str, dict]:
    """family -> {cfg, sm, mib}: the median-SM-activity row among the small, quick ones."""
    by_family: dict[str, list[dict]] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            try:
                sm = float(row["gpu_sm_active_pct"])
                mib = float(row["gpu_nvml_used_bytes"]) / 2**20
                rate = float(row["gpu_steps_per_s"])
            except (KeyError, ValueError):
                continue
            if mib <= MAX_MIB and rate >= MIN_STEPS_S:
                by_family.setdefault(row["family"], []).append(
                    {"cfg": json.loads(row["config_json"]), "sm": sm, "mib": mib,
                     "row_id": row["row_id"]})
    out = {}
    for fam, rows in sorted(by_family.items()):
        rows.sort(key=lambda r: r["sm"])
        out[fam] = rows[len(rows) // 2]
    return out


def start_mps(tmp: Path) -> dict[str, str]:
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(tmp / "log")}
    for d in env.values():
        Path(d).mkdir(parents=True, exist_ok=True)
    subprocess.run(["nvidia-cuda-mps-control", "-d"], env={**os.environ, **env}, check=True)
    return env


def stop_mps(env: dict[str, str]) -> None:
    subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True,
                   env={**os.environ, **env}, check=False)


def run(out: Path, seconds: float, budget_s: float, modes: list[str]) -> list[dict]:
    import pynvml

    t_end = time.monotonic() + budget_s
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    gpu = pynvml.nvmlDeviceGetName(h)
    gpu = gpu if isinstance(gpu, str) else gpu.decode()
    picks = pick_configs()
    print(f"configs: { {f: p['row_id'] for f, p in picks.items()} }", file=sys.stderr)
    rows: list[dict] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for mode in modes:
            if time.monotonic() > t_end:
                break
            tmp = Path(tempfile.mkdtemp(prefix="sparse-mps-"))
            try:
                mps = start_mps(tmp) if mode == "mps" else {}
            except (OSError, subprocess.CalledProcessError) as exc:
                print(f"[{mode}] cannot start the MPS daemon ({exc}): skipped", file=sys.stderr)
                continue
            workers: dict[str, Worker] = {}
            twins: dict[str, Worker] = {}  # a second worker per config, for self-pairs
            try:
                for fam, p in picks.items():  # all start at once; torch imports overlap
                    env = dict(mps)
                    if mode == "mps":
                        pct = max(10, min(100, round(p["sm"] * MPS_HEADROOM)))
                        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(pct)
                        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={round(1.5 * p['mib'])}M"
                    workers[fam] = Worker(f"{fam}#{p['row_id']}", p["cfg"], env)
                    twins[fam] = Worker(f"{fam}#{p['row_id']}'", p["cfg"], env)
                for w in [*workers.values(), *twins.values()]:
                    w.wait_ready()
                solo, prof = {}, {}
                for fam, w in workers.items():
                    profiler = Profiler(h, w.pid)
                    profiler.start()
                    w.start(seconds)
                    solo[fam] = w.result()
                    profiler.stop.set()
                    profiler.join()
                    prof[fam] = profiler.profile()
                    print(f"[{mode}] {w.name} alone: {solo[fam] * 1e3:.2f} ms/step {prof[fam]}",
                          file=sys.stderr)
                for a, b in combinations_with_replacement(sorted(workers), 2):
                    if time.monotonic() > t_end:
                        print(f"[{mode}] time budget spent, pairs after {a}/{b} skipped",
                              file=sys.stderr)
                        break
                    pair_rows = measure_pair(mode, a, b, workers, twins, solo, prof, seconds,
                                             gpu)
                    for r in pair_rows:
                        writer.writerow(r)
                    fh.flush()
                    rows += pair_rows
            finally:
                for w in [*workers.values(), *twins.values()]:
                    w.close()
                if mps:
                    stop_mps(mps)
                shutil.rmtree(tmp, ignore_errors=True)
    return rows


def measure_pair(mode: str, a: str, b: str, workers: dict, twins: dict, solo: dict,
                 prof: dict, seconds: float, gpu: str) -> list[dict]:
    first, second = workers[a], (twins[b] if a == b else workers[b])
    first.start(seconds)
    second.start(seconds)
    step_a, step_b = first.result(), second.result()
    if a == b:  # a family next to itself: one row (both sides are the same config)
        return [_row(mode, a, a, prof, solo, step_a, gpu)]
    print(f"[{mode}] {a} + {b}: {solo[a] / step_a:.3f} / {solo[b] / step_b:.3f}",
          file=sys.stderr)
    return [_row(mode, a, b, prof, solo, step_a, gpu), _row(mode, b, a, prof, solo, step_b, gpu)]


def _row(mode: str, a: str, b: str, prof: dict, solo: dict, pair_step: float, gpu: str) -> dict:
    pa, pb = prof[a], prof[b]
    return {"mode": mode, "job_a": a, "job_b": b,
            "a_gpu_util": pa["gpu_util"], "a_mem_util": pa["mem_util"], "a_mem_mib": pa["mem_mib"],
            "b_gpu_util": pb["gpu_util"], "b_mem_util": pb["mem_util"], "b_mem_mib": pb["mem_mib"],
            "a_speed": round(min(1.0, solo[a] / pair_step), 4),
            "a_solo_step_s": round(solo[a], 6), "a_pair_step_s": round(pair_step, 6),
            "a_sm_active_pct": pa["sm_active_pct"], "b_sm_active_pct": pb["sm_active_pct"],
            "a_dram_bw_pct": pa["dram_bw_pct"], "b_dram_bw_pct": pb["dram_bw_pct"], "gpu": gpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="results/gpu-pairs.csv")
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per measurement")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting pairs after")
    ap.add_argument("--modes", default="timeslice,mps")
    args = ap.parse_args()
    if args.worker:
        worker_main(json.loads(args.worker))
        return
    out = Path(args.out)
    try:
        rows = run(out, args.seconds, args.budget_s, [m for m in args.modes.split(",") if m])
        print(f"{len(rows)} pair rows in {out}", file=sys.stderr)
    finally:  # whatever was measured reaches stdout, in case files do not come back
        if out.exists():
            sys.stdout.write(out.read_text())


if __name__ == "__main__":
    main()
