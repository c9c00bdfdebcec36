"""python -m bench.throughput: pods bound per second, extender vs the stock scheduler.

All pods are created first with the scheduler stopped; the clock runs from the moment the
scheduler is ready until the last pod is bound, so pod creation does not count (pods it bound
before it answered ready count neither in the pods nor in the time). Each scale
runs the stock scheduler (whole GPUs) first, then a null extender (``null_extender``: the same
protocol answered at once, the ceiling of any extender), then the extender with each workload
and store, then the stock scheduler again, on the same fake nodes; it prints where a pod's time
goes on both sides and the load average of each run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "e2e"), str(ROOT / "tests")]  # the e2e harness

import cluster as e2e_cluster  # noqa: E402
from extender_proc import Extender  # noqa: E402
from service_proc import ServiceProcess  # noqa: E402

from bench.procstat import tree_cpu, tree_cpu_delta  # noqa: E402
from bench.redis_server import RedisServer  # noqa: E402
from bench.throughput.bound import BoundWatch  # noqa: E402
from bench.throughput.breakdown import (  # noqa: E402
    STAGES,
    Samples,
    api_requests,
    extender_breakdown,
    scheduler_breakdown,
)

# kube-scheduler's default client QPS (50) would cap the stock scheduler's own Binding calls;
# both runs get the same generous limits so the comparison is about scheduling.
CLIENT = {"qps": 500, "burst": 1000}
# The bench reads kube-scheduler's /metrics without setting up delegated authentication.
OPEN_PATHS = "/healthz,/readyz,/livez,/metrics"
WORKLOADS = ("shares", "whole", "mixed")
STOCK = "stock kube-scheduler"
NULL = "null extender"
# The extender's verbs per pod in kube-scheduler's scheduling cycle: filter then prioritize,
# or filter alone (no prioritizeVerb; the extender answers only its best nodes, or only its
# single best one: kube-scheduler then skips its own scoring).
VERBS = ("two-call", "filter-only", "filter-one")
VERB_ARGS = {"two-call": (), "filter-only": ("--filter-best-within", "0"),
             "filter-one": ("--filter-best-within", "0", "--filter-best-single")}


class NullExtender(ServiceProcess):
    """bench.throughput.null_extender as its own process: the protocol's ceiling."""

    what = "null extender"

    def __init__(self, workdir: Path, c: e2e_cluster.LocalCluster, one: bool = False,
                 burn_ms: float = 0.0) -> None:
        super().__init__(workdir, "null-extender")
        self.server, self.token = c.server, c.token
        (self.port,) = e2e_cluster.free_ports(1)
        self.one = one  # filter passes only the first candidate
        self.burn_ms = burn_ms  # CPU each filter spends first

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/scheduler"

    def probe_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/readyz"

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "bench.throughput.null_extender", str(self.port),
                self.server, self.token, *(["one"] if self.one else []),
                *([f"{self.burn_ms:g}"] if self.burn_ms else [])]


def pod_request(workload: str, i: int) -> dict[str, Any]:
    """shares: 250 milli + 4 GiB; whole: one GPU; mixed: every third pod a whole GPU."""
    if workload == "whole" or (workload == "mixed" and i % 3 == 0):
        return {"gpus": 1}
    return {"milli": 250, "mem_mib": 4000}


async def _create_many(kubeconfig: str, count: int, create: Callable[[Any, int], Awaitable]
                       ) -> None:
    """``create(core_api, i)`` for every i below ``count``, 16 requests in flight."""
    from kubernetes_asyncio import client

    api = await e2e_cluster.api_client(kubeconfig)
    async with api:
        core = client.CoreV1Api(api)
        sem = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            async with sem:
                await create(core, i)

        await asyncio.gather(*(one(i) for i in range(count)))


async def create_pods(kubeconfig: str, count: int, workload: str) -> None:
    await _create_many(kubeconfig, count, lambda core, i: e2e_cluster.create_pod(
        core, f"tp-{i:05d}", **pod_request(workload, i)))


async def create_nodes(kubeconfig: str, count: int, gpus: int) -> None:
    await _create_many(kubeconfig, count, lambda core, i: e2e_cluster.create_gpu_node(
        core, f"tp-node-{i:05d}", gpus=gpus, memory_mib=16384))


def delete_pods(c: e2e_cluster.LocalCluster) -> None:
    c.request("DELETE", "/api/v1/namespaces/default/pods", {"gracePeriodSeconds": 0})
    deadline = time.monotonic() + 120
    while c.request("GET", "/api/v1/namespaces/default/pods?limit=1")["items"]:
        if time.monotonic() > deadline:
            raise RuntimeError("pods not deleted within 2 minutes")
        time.sleep(0.5)


def scrape(url: str, c: e2e_cluster.LocalCluster | None = None) -> Samples:
    if c is not None:  # kube-scheduler's secure port, with the admin token
        status, body = c._http_get(url, auth=True)
        return Samples.parse(body.decode(errors="replace") if status == 200 else "")
    import urllib.request

    # At 5,000 nodes the per-GPU gauges make a large page, slow on a loaded machine.
    with urllib.request.urlopen(url, timeout=120) as r:
        return Samples.parse(r.read().decode())


def timed_pods(pods: int, bound_early: int) -> int:
    """Pods the clock counts; a clear error when the scheduler bound them all before it
    answered ready (a burst too small for the cluster to time)."""
    if bound_early >= pods:
        raise click.ClickException(
            f"all {pods} pods were bound before kube-scheduler answered ready: nothing to time;"
            " run with more --pods")
    return pods - bound_early


def log_problems(path: Path, limit: int = 80) -> list[str]:
    """The extender's WARNING, ERROR and CRITICAL lines and every traceback, with the line
    before it (what raised: a log message, or a thread's or the interpreter's own notice) and
    the indented lines after it; at most ``limit`` lines."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    keep: set[int] = set()
    for i, line in enumerate(lines):
        if any(f" {level} " in line for level in ("WARNING", "ERROR", "CRITICAL")):
            keep.add(i)
        elif line.startswith("Traceback"):
            keep.update(range(max(i - 1, 0), i + 1))
            j = i + 1
            while j < len(lines) and (lines[j].startswith(" ") or lines[j] == ""):
                j += 1
            keep.update(range(i + 1, min(j + 1, len(lines))))  # and the exception's line
    return [lines[i] for i in sorted(keep)][:limit]


def run_once(c: e2e_cluster.LocalCluster, nodes: int, pods: int, workload: str,
             store: str | None, workdir: Path, profile: Path | None = None,
             verbs: str = "two-call", percentage: int | None = None,
             null_burn_ms: float = 0.0) -> dict:
    """One burst; ``store`` None = the stock scheduler alone, "null" = the null extender;
    ``verbs`` "filter-only"/"filter-one": the scheduler config has no prioritizeVerb (and the
    extender answers only its best nodes / its best node). ``percentage``: kube-scheduler's
    percentageOfNodesToScore (None: its default, adaptive). ``null_burn_ms``: CPU the null
    extender's filter spends per pod."""
    delete_pods(c)
    ext: Extender | NullExtender | None = None
    if store == "null":
        ext = NullExtender(workdir, c, one=verbs == "filter-one",
                           burn_ms=null_burn_ms).start(timeout=60)
    elif store is not None:
        extra = ("--log-level", "warning", *VERB_ARGS[verbs])
        ext = Extender(workdir, c.kubeconfig, name="bench-extender", store=store,
                       extra=extra).start(timeout=120)
        deadline = time.monotonic() + 120
        while len(ext.inspect()["nodes"]) < nodes and time.monotonic() < deadline:
            time.sleep(0.2)
    click.echo(f"  creating {pods} pods ...", err=True)
    asyncio.run(create_pods(str(c.kubeconfig), pods, workload))
    overrides: dict[str, Any] = {
        "clientConnection": {"kubeconfig": str(c.kubeconfig), **CLIENT}}
    if percentage is not None:  # the same for the stock scheduler and every extender run
        overrides["percentageOfNodesToScore"] = percentage
    if ext is not None and verbs != "two-call":
        extenders = e2e_cluster.render_scheduler_config(ext.url, c.kubeconfig)["extenders"]
        for e in extenders:
            e.pop("prioritizeVerb", None)
        overrides["extenders"] = extenders
    ext_url = f"{ext.base}/metrics" if isinstance(ext, Extender) else None
    # Read before the scheduler starts: it binds from its first moment, and a fast one would
    # otherwise bind pods while the bench scrapes (the API server's page is large).
    a_before = scrape(f"{c.server}/metrics", c)
    e_before = scrape(ext_url) if ext_url else None
    bound = BoundWatch(c.server, c.token, c._ssl).start()
    try:
        c.start_scheduler(ext.url if ext else None, overrides=overrides, verbosity=0,
                          extra_args=[f"--authorization-always-allow-paths={OPEN_PATHS}"])
        started = time.monotonic()
        spy = None
        if profile is not None and ext is not None and ext.proc is not None:
            spy = subprocess.Popen(
                [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw",
                 "--rate", "200", "-o", str(profile), "--pid", str(ext.proc.pid)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sched_url = f"https://127.0.0.1:{c.scheduler_port}/metrics"
        s_before = Samples()  # a fresh kube-scheduler: every counter starts at zero
        load_before = os.getloadavg()[0]
        # CPU per bound pod of each process on the pod's path: on a small machine they share
        # the cores, so what one burns (the API server, the extender) slows the others.
        procs = {"kube-scheduler": c.scheduler.pid if c.scheduler else None,
                 "kube-apiserver": c.apiserver.pid if c.apiserver else None,
                 "etcd": c.etcd.pid if c.etcd else None,
                 "extender": ext.proc.pid if ext is not None and ext.proc is not None else None}
        cpu_before = {name: tree_cpu(pid) for name, pid in procs.items()}
        done = 0
        while done < pods:
            done = bound.wait(pods, 5)
            if done < pods:
                click.echo(f"    {done}/{pods} bound", err=True)
            if time.monotonic() - started > 600:
                raise RuntimeError(f"only {done}/{pods} pods bound after 10 minutes")
        times = bound.times()
        # Pods bound before the clock (between the scheduler's first cycle and its /readyz
        # answering) count neither in the pods nor in the time.
        bound_early = sum(t <= started for t in times)
        timed = timed_pods(pods, bound_early)
        elapsed = max(times[-1] - started, 1e-3)
        half_at = max(times[(pods + 1) // 2 - 1] - started, 0.0)
        cpu_after = {name: tree_cpu(pid) for name, pid in procs.items()}
        cpu_ms = {name: 1000 * tree_cpu_delta(cpu_before[name], cpu_after[name]) / timed
                  for name, pid in procs.items() if pid is not None}
        ext_pid = procs["extender"]
        if ext_pid is not None:  # the part of the extender's CPU its children used
            children = {pid: sec for pid, sec in cpu_after["extender"].items() if pid != ext_pid}
            cpu_ms["extender children"] = 1000 * tree_cpu_delta(
                cpu_before["extender"], children) / timed
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            spy.wait(30)
        s_after = scrape(sched_url, c)
        a_after = scrape(f"{c.server}/metrics", c)
        out: dict = {"pods": pods, "seconds": elapsed,
                     "pods_per_s": timed / elapsed, "bound_early": bound_early,
                     "verbs": verbs if ext is not None else None,
                     "load": [load_before, os.getloadavg()[0]],
                     "median_to_bind_s": half_at, "cpu_ms_per_pod": cpu_ms,
                     "bound_watch_renewals": bound.renewals,
                     "scheduler": scheduler_breakdown(s_before, s_after, pods),
                     "api_requests": api_requests(a_before, a_after, pods)}
        if ext_url and e_before is not None:
            out["extender"] = extender_breakdown(e_before, scrape(ext_url))
    finally:
        bound.close()
        c.stop_scheduler()
        if ext is not None:
            ext.stop()
    if isinstance(ext, Extender):  # one log per run: the next run's extender starts afresh
        out["extender_log"] = log_problems(ext.log_path)
        ext.log_path.unlink(missing_ok=True)
    return out


def print_scale(nodes: int, gpus: int, pods: int, results: dict[str, dict]) -> None:
    stock = results[STOCK]
    # The stock scheduler runs first and last: the machine's load drifts over a scale's runs,
    # so each ratio is to the mean of the two.
    stock_rates = [r["pods_per_s"] for label, r in results.items() if label.startswith(STOCK)]
    stock_rate = sum(stock_rates) / len(stock_rates)
    # Each extender run is compared with the null extender that used the same verbs.
    nulls = {r.get("verbs", "two-call"): r for label, r in results.items()
             if label.startswith(NULL)}

    def null_of(r: dict) -> dict | None:
        return nulls.get(r.get("verbs") or "two-call") if r.get("verbs") else None

    click.echo(f"\n{pods} pods on {nodes} nodes x {gpus} GPUs (one run each, same cluster)\n")
    click.echo(f"  {'run':40} {'pods/s':>7} {'ratio':>6} {'/null':>6} {'ms/pod':>7}"
               f" {'median':>7} {'sched alg':>9} {'attempt':>8} {'tries':>6} {'load':>9}")
    for label, r in results.items():
        s, ratio = r["scheduler"], r["pods_per_s"] / stock_rate
        null = null_of(r)
        vs_null = (f"{r['pods_per_s'] / null['pods_per_s']:6.2f}" if null is not None
                   else f"{'-':>6}")
        click.echo(f"  {label:40} {r['pods_per_s']:7.1f} {ratio:6.2f} {vs_null}"
                   f" {1000 / r['pods_per_s']:7.2f} {r['median_to_bind_s'] or 0:6.2f}s"
                   f" {s.get('algorithm_ms', 0):8.2f}  {s.get('attempt_ms', 0):7.2f}"
                   f" {s.get('attempts_per_pod', 0):6.2f}"
                   f" {r['load'][0]:4.1f}>{r['load'][1]:4.1f}")
    click.echo(f"\n  ratio: pods/s over the stock scheduler's mean ({stock_rate:.1f}) of its runs"
               " before and after the extender's;")
    for verbs, null in nulls.items():
        null_rate = null["pods_per_s"]
        click.echo(f"  /null: pods/s over the null extender's with the same verbs ({verbs}:"
                   f" {null_rate:.1f}; the same kube-scheduler\n  and protocol, every verb"
                   " answered at once): what is left to any extender. That null extender"
                   f" reaches {null_rate / stock_rate:.2f}x stock.")
    click.echo("  ms/pod: wall time per bound pod; median: time from the scheduler's start until"
               " half the burst\n  was bound; sched alg: kube-scheduler's scheduling algorithm"
               " per attempt (in-tree filters and\n  scores plus the extender's filter and"
               " prioritize round trips); attempt: the whole\n  scheduling cycle; tries:"
               " attempts per bound pod; load: the 1-minute load average\n  (all the machine's"
               " processes) at the run's start > end.")
    click.echo(f"\n  {'inside kube-scheduler, ms per attempt':40} {'alg':>6} {'filter':>7}"
               f" {'scoring':>8} {'rest':>6} {'hinted':>7}")
    for label, r in results.items():
        s = r["scheduler"]
        per_try = max(s.get("attempts_per_pod", 1), 1e-9)
        scoring = (s.get("prescore_ms", 0) * s.get("prescore_calls", 0)
                   + s.get("score_ms", 0) * s.get("score_calls", 0)) / per_try
        filtering = s.get("filter_ms", 0) * s.get("filter_calls", 0) / per_try
        alg = s.get("algorithm_ms", 0)
        click.echo(f"  {label:40} {alg:6.2f} {filtering:7.2f} {scoring:8.2f}"
                   f" {alg - filtering - scoring:6.2f} {s.get('hinted_per_pod', 0):7.2f}")
    click.echo("  alg: the scheduling algorithm; filter: its Filter plugins over the nodes it"
               " checks (16 in\n  parallel); scoring: its PreScore and Score plugins (skipped"
               " when one node is feasible);\n  rest: alg less both, i.e. the extender's"
               " round trips; hinted: pods per bound pod placed from\n  the previous identical"
               " pod's ranking (OpportunisticBatching, which kube-scheduler turns off\n  in a"
               " profile with extenders).")
    click.echo(f"\n  {'CPU ms per bound pod':40} {'scheduler':>9} {'apiserver':>9} {'etcd':>6}"
               f" {'extender':>8} {'all':>6}")
    for label, r in results.items():
        cpu = r.get("cpu_ms_per_pod", {})
        cells = [cpu.get(k) for k in ("kube-scheduler", "kube-apiserver", "etcd", "extender")]
        click.echo(f"  {label:40} " + " ".join(
            f"{v:{w}.2f}" if v is not None else f"{'-':>{w}}"
            for v, w in zip(cells, (9, 9, 6, 8), strict=True))
            + f" {sum(v for v in cells if v is not None):6.2f}")
    click.echo("  (user + system CPU of each process over the run, per bound pod, with its"
               " children's: the\n  extender's share price worker; the machine's"
               f" {os.cpu_count()} cores are shared by all of them\n  and whatever else runs)")
    click.echo("\n  API server requests per bound pod (the bench's own watch of bound pods"
               " included):")
    for label, r in results.items():
        top = list(r.get("api_requests", {}).items())[:6]
        click.echo(f"  {label:40} " + ", ".join(f"{k} {v:.2f}" for k, v in top))
    for label, r in results.items():
        ext = r.get("extender")
        if not ext:
            continue
        null = null_of(r)
        base_alg = (null or stock)["scheduler"].get("algorithm_ms", 0.0)
        base_name = "the null extender's (same verbs)" if null else "stock's"
        click.echo(f"\n  {label}: inside the extender, mean ms per call")
        click.echo(f"    {'verb':11} {'calls':>6} {'total':>7} " +
                   " ".join(f"{s:>9}" for s in STAGES))
        for verb, row in ext.items():
            if verb in ("event loop", "reuse", "prices", "renewal"):
                continue
            click.echo(f"    {verb:11} {int(row['calls']):6d} {row['total_ms']:7.2f} " +
                       " ".join(f"{row.get(s, 0.0):9.3f}" for s in STAGES))
        server = sum(ext[v]["total_ms"] for v in ("filter", "prioritize") if v in ext)
        alg = r["scheduler"].get("algorithm_ms", 0.0)
        lag = ext.get("event loop", {})
        click.echo(f"    filter+prioritize: {server:.2f} ms in the extender's handlers; the"
                   f" scheduling algorithm took\n    {alg - base_alg:.2f} ms more than"
                   f" {base_name}, so {max(alg - base_alg - server, 0):.2f} ms per pod are"
                   " waiting for the event loop,\n    HTTP and JSON beyond the null's")
        reuse = ext.get("reuse", {})
        if reuse:
            cycle, shape = reuse.get("cycle", {}), reuse.get("shape", {})
            node = reuse.get("node", {})
            asked = cycle.get("hit", 0) + cycle.get("miss", 0)
            click.echo(f"    prioritize reused filter's costs in {cycle.get('hit', 0):.0f} of"
                       f" {asked:.0f} calls; node verdicts: {node.get('hit', 0):.0f} reused,"
                       f" {node.get('miss', 0):.0f} computed;\n    per-term cost cache:"
                       f" {shape.get('hit', 0):.0f} candidate GPUs reused,"
                       f" {shape.get('miss', 0):.0f} nodes recomputed")
        if lag:
            click.echo(f"    event-loop lag: mean {lag['total_ms']:.2f} ms, p99 <="
                       f" {lag['p99']:.1f} ms (a ready request waits as long)")
        prices = ext.get("prices")
        if prices is not None:
            click.echo("    share price tables from the worker: " + ", ".join(
                f"{n:.0f} {result}" for result, n in prices.items()))
        renewal = ext.get("renewal")
        if renewal is not None:
            click.echo(f"    cache renewal between requests: {renewal['renewed']:.0f} renewed,"
                       f" {renewal['steps']:.0f} steps, {renewal['cpu_ms']:.0f} ms of CPU")
        children = r.get("cpu_ms_per_pod", {}).get("extender children")
        if children is not None:
            click.echo(f"    of the extender's CPU per bound pod, its child processes (the price"
                       f" worker): {children:.2f} ms")
        problems = r.get("extender_log", [])
        click.echo(f"    extender log: {len(problems)} warning or error line(s)"
                   + "".join(f"\n      {line[:150]}" for line in problems))


@click.command()
@click.option("--nodes", "scales", multiple=True, type=int, default=(500,), show_default=True,
              help="Fake nodes; repeat for several scales.")
@click.option("--gpus", default=8, show_default=True, help="GPUs per node.")
@click.option("--pods", default=2000, show_default=True)
@click.option("--workload", "workloads", multiple=True, type=click.Choice(WORKLOADS),
              default=("shares", "whole"), show_default=True,
              help="Pods through the extender: GPU shares, whole GPUs, or mixed; repeatable.")
@click.option("--store", "stores", multiple=True, type=click.Choice(("memory", "redis")),
              default=("memory",), show_default=True, help="Extender ledger store; repeatable.")
@click.option("--verbs", "verb_modes", multiple=True, type=click.Choice(VERBS),
              default=("two-call",), show_default=True,
              help="Extender verbs per pod: filter and prioritize, or filter alone (no"
                   " prioritizeVerb; the extender answers its best nodes); repeatable. The null"
                   " extender runs with the same verbs. filter-one: filter answers its single"
                   " best node, so that kube-scheduler skips its own scoring.")
@click.option("--percentage-of-nodes-to-score", "percentage", type=click.IntRange(0, 100),
              help="kube-scheduler's percentageOfNodesToScore, the same for every run (default:"
                   " kube-scheduler's adaptive one, e.g. 46 % of 500 nodes, 10 % of 5,000).")
@click.option("--nulls-only", is_flag=True,
              help="Only the stock scheduler and the null extenders (the protocol's ceiling).")
@click.option("--null-burn-ms", type=click.FloatRange(0), default=0.0, show_default=True,
              help="CPU the null extender's filter spends per pod before it answers: what an"
                   " extender costing that much more, and nothing else, gets on this machine.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("results/throughput.json"),
              show_default=True)
@click.option("--profile", is_flag=True,
              help="Sample the extender with py-spy during each run (collapsed stacks next to"
                   " --out).")
def main(scales: tuple[int, ...], gpus: int, pods: int, workloads: tuple[str, ...],
         stores: tuple[str, ...], verb_modes: tuple[str, ...], percentage: int | None,
         nulls_only: bool, null_burn_ms: float, out: Path, profile: bool) -> None:
    """Pods bound per second through kube-scheduler: the stock scheduler alone (whole GPUs),
    then the sparse extender with each workload and store, on the same fake cluster; with the
    per-pod breakdown of both sides."""
    if e2e_cluster.missing_binaries():
        raise click.ClickException("control plane not built: run hack/build-control-plane.sh")
    results: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="sparse-tp-") as tmp, \
            e2e_cluster.LocalCluster(quiet=True) as c:
        try:
            redis = RedisServer() if "redis" in stores and not nulls_only else None
        except RuntimeError as e:
            raise click.ClickException(str(e)) from e
        try:
            for nodes in scales:
                c.reset()
                click.echo(f"creating {nodes} nodes ...", err=True)
                if null_burn_ms:
                    click.echo(f"(the null extender's filter spends {null_burn_ms:g} ms of CPU"
                               " per pod before it answers)")
                asyncio.run(create_nodes(str(c.kubeconfig), nodes, gpus))
                runs: dict[str, dict] = {}
                plan: list[tuple[str, str, str | None, str]] = [(STOCK, "whole", None, "")]
                for v in verb_modes:
                    tag = "" if v == "two-call" else f" ({v})"
                    plan.append((f"{NULL}{tag}", "whole", "null", v))
                    plan += [(f"extender, {w}, {s}{tag}", w, s, v)
                             for s in stores for w in workloads if not nulls_only]
                plan.append((f"{STOCK} (again)", "whole", None, ""))
                for label, workload, store, verbs in plan:
                    click.echo(f"{label} ({nodes} nodes):", err=True)
                    store_url = (redis.url if store == "redis" and redis else store)
                    if redis is not None:
                        redis.flush()
                    stacks = (out.with_name(f"{out.stem}-{nodes}-{workload}-{store}-{verbs}.txt")
                              if profile and store not in (None, "null") else None)
                    if stacks is not None:
                        stacks.parent.mkdir(parents=True, exist_ok=True)
                    runs[label] = run_once(c, nodes, pods, workload, store_url, Path(tmp),
                                           stacks, verbs or "two-call", percentage,
                                           null_burn_ms)
                results[str(nodes)] = runs
                print_scale(nodes, gpus, pods, runs)
        finally:
            if redis is not None:
                redis.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    click.echo(f"\nwritten {out}")


if __name__ == "__main__":
    main()
