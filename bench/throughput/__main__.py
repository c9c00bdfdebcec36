"""python -m bench.throughput: pods bound per second, extender vs the stock scheduler.

All pods are created first with the scheduler stopped; the clock runs from the moment the
scheduler is ready until the last pod is bound, so pod creation does not count.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "e2e"), str(ROOT / "tests")]  # the e2e harness

import cluster as e2e_cluster  # noqa: E402
from extender_proc import Extender  # noqa: E402

# kube-scheduler's default client QPS (50) would cap the stock scheduler's own Binding calls;
# both runs get the same generous limits so the comparison is about scheduling.
CLIENT = {"qps": 500, "burst": 1000}


async def create_pods(kubeconfig: str, count: int, shared: bool) -> None:
    from kubernetes_asyncio import client

    api = await e2e_cluster.api_client(kubeconfig)
    async with api:
        core = client.CoreV1Api(api)
        sem = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            kw: dict[str, Any] = ({"milli": 250, "mem_mib": 4000} if shared else {"gpus": 1})
            async with sem:
                await e2e_cluster.create_pod(core, f"tp-{i:05d}", **kw)

        await asyncio.gather(*(one(i) for i in range(count)))


def unbound_count(c: e2e_cluster.LocalCluster) -> int:
    """Pods still waiting; the list shrinks as the run goes, so polling stays cheap."""
    pods = c.request("GET", "/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3D")
    return len(pods["items"])


def verb_times(ext: Extender) -> dict[str, dict[str, float]]:
    """Per verb: calls and mean seconds inside the extender, from its own /metrics."""
    import re
    import urllib.request

    base = ext.url.rsplit("/scheduler", 1)[0]
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, dict[str, float]] = {}
    for kind in ("sum", "count"):
        pattern = rf'^sparse_extender_request_duration_seconds_{kind}{{verb="(\w+)"}} (\S+)$'
        for verb, value in re.findall(pattern, text, flags=re.M):
            out.setdefault(verb, {})[kind] = float(value)
    return {v: {"calls": d.get("count", 0.0),
                "mean_ms": 1000 * d.get("sum", 0.0) / max(d.get("count", 0.0), 1.0)}
            for v, d in out.items()}


def run_once(c: e2e_cluster.LocalCluster, nodes: int, gpus: int, pods: int, with_extender: bool,
             workdir: Path) -> dict:
    c.reset()
    click.echo(f"  creating {nodes} nodes ...", err=True)
    c.create_gpu_nodes(nodes, prefix="tp-node-", gpus=gpus, memory_mib=16384)
    ext = None
    if with_extender:
        ext = Extender(workdir, c.kubeconfig, name="bench-extender",
                       extra=("--log-level", "warning")).start()
        deadline = time.monotonic() + 60
        while len(ext.inspect()["nodes"]) < nodes and time.monotonic() < deadline:
            time.sleep(0.2)
    click.echo(f"  creating {pods} pods ...", err=True)
    asyncio.run(create_pods(str(c.kubeconfig), pods, shared=with_extender))
    overrides = {"clientConnection": {"kubeconfig": str(c.kubeconfig), **CLIENT}}
    try:
        c.start_scheduler(ext.url if ext else None, overrides=overrides, verbosity=0)
        started = time.monotonic()
        done, last_report = 0, started
        while done < pods:
            time.sleep(0.5)
            done = pods - unbound_count(c)
            if time.monotonic() - last_report > 5:
                click.echo(f"    {done}/{pods} bound", err=True)
                last_report = time.monotonic()
            if time.monotonic() - started > 600:
                raise RuntimeError(f"only {done}/{pods} pods bound after 10 minutes")
        elapsed = time.monotonic() - started
        verbs = verb_times(ext) if ext is not None else {}
    finally:
        c.stop_scheduler()
        if ext is not None:
            ext.stop()
    out: dict = {"pods": pods, "seconds": elapsed, "pods_per_s": pods / elapsed}
    if verbs:
        out["extender_verbs"] = verbs
    return out


@click.command()
@click.option("--nodes", default=500, show_default=True)
@click.option("--gpus", default=8, show_default=True, help="GPUs per node.")
@click.option("--pods", default=2000, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("results/throughput.json"),
              show_default=True)
def main(nodes: int, gpus: int, pods: int, out: Path) -> None:
    """Pods bound per second through kube-scheduler: with the sparse extender (GPU shares) and
    the stock scheduler alone (whole GPUs), on the same fake cluster."""
    missing = e2e_cluster.missing_binaries()
    if missing:
        raise click.ClickException("control plane not built: run hack/build-control-plane.sh")
    results = {}
    with tempfile.TemporaryDirectory(prefix="sparse-tp-") as tmp, \
            e2e_cluster.LocalCluster(quiet=True) as c:
        for label, with_ext in (("stock kube-scheduler, whole GPUs", False),
                                ("kube-scheduler + sparse extender, GPU shares", True)):
            click.echo(f"{label}:", err=True)
            results[label] = run_once(c, nodes, gpus, pods, with_ext, Path(tmp))
    click.echo(f"\n{pods} pods on {nodes} nodes x {gpus} GPUs\n")
    for label, r in results.items():
        click.echo(f"  {label:48} {r['seconds']:7.1f} s  {r['pods_per_s']:7.1f} pods/s")
    for r in results.values():
        for verb, v in sorted(r.get("extender_verbs", {}).items()):
            click.echo(f"    {verb:10} {int(v['calls']):6d} calls  {v['mean_ms']:6.2f} ms mean "
                       "inside the extender")
    base, ours = results.values()
    click.echo(f"\n  ratio extender / stock: {ours['pods_per_s'] / base['pods_per_s']:.2f}"
               f"  (goal: >= 100 pods/s with the extender)")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
