#!/usr/bin/env python3
"""``make demo``: the real kube-scheduler placing a mixed set of GPU pods through sparse.

Starts etcd + kube-apiserver (tests/e2e/cluster.py, binaries from hack/build-control-plane.sh),
creates a few fake GPU nodes whose ``sparse.io/gpu-inventory`` annotation the extender reads,
runs ``sparse-extender serve --kubeconfig`` (in-memory ledger) and a kube-scheduler whose
``sparse-scheduler`` profile calls it, then submits whole-GPU jobs, GPU shares and a
recommendation job next to a compute-heavy one. Prints where each pod landed and on which GPUs,
and the extender's ``/inspect`` view of the ledger. The cluster stays up for kubectl until
Ctrl-C, which stops every process it started (by PID) and removes its temp dir.

    .venv/bin/python hack/demo.py [--exit] [--keep] [--timeout 60] [--json]

Nothing runs the pods (no kubelet): bound pods stay Pending with ``spec.nodeName`` set and the
assignment annotations sparse wrote at bind.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests" / "e2e"), str(REPO / "tests"), str(REPO)]

import cluster as e2e_cluster  # noqa: E402

from extender.interference import default_matrix  # noqa: E402

NAMESPACE = "ml"
ANN_JOB_CLASS = "sparse.io/job-class"
ANN_GPU_UUIDS = "sparse.io/gpu-uuids"
ANN_ASSIGNMENT = "sparse.io/assignment"


@dataclass(frozen=True)
class DemoNode:
    name: str
    gpus: int
    model: str
    memory_mib: int


@dataclass(frozen=True)
class DemoPod:
    name: str
    job_class: str
    what: str
    gpus: int | None = None  # whole GPUs (nvidia.com/gpu)
    milli: int | None = None  # a share of one GPU (sparse.io/gpu-milli, 1-1000)
    mem_mib: int | None = None  # memory of that share (sparse.io/gpu-mem, MiB)

    @property
    def asks(self) -> str:
        parts = []
        if self.gpus:
            parts.append(f"{self.gpus} GPU{'s' if self.gpus > 1 else ''}")
        if self.milli or self.mem_mib:
            parts.append(f"{(self.milli or 0) / 10:g}% + {(self.mem_mib or 0) / 1024:g} GiB")
        return " + ".join(parts)


NODES = (
    DemoNode("gpu-node-0", 4, "V100M32", 32768),
    DemoNode("gpu-node-1", 4, "V100M32", 32768),
    DemoNode("gpu-node-2", 2, "V100M16", 16384),
)

# In submission order. The scheduler takes them one at a time, each through filter, prioritize
# and bind on the extender.
PODS = (
    DemoPod("bert-large-pretrain", "transformer", "BERT pre-training, 4 whole GPUs", gpus=4),
    DemoPod("resnet50-train", "cnn", "ResNet-50, 1 whole GPU", gpus=1),
    DemoPod("yolo-finetune", "cnn", "YOLO fine-tuning: compute-heavy share",
            milli=600, mem_mib=12288),
    DemoPod("dlrm-ctr", "recommendation", "DLRM: embedding-bound share",
            milli=300, mem_mib=10240),
    DemoPod("wide-deep", "recommendation", "Wide&Deep share", milli=200, mem_mib=6144),
    DemoPod("deepfm", "recommendation", "DeepFM share", milli=200, mem_mib=4096),
    DemoPod("lstm-lm", "rnn", "LSTM language model share", milli=400, mem_mib=8192),
    DemoPod("a3c-agent", "rl", "RL agent, small share", milli=100, mem_mib=2048),
    DemoPod("embedding-giant", "recommendation", "asks 40 GiB of one GPU: fits nowhere",
            milli=200, mem_mib=40960),
)


def pod_manifest(p: DemoPod) -> dict[str, Any]:
    return e2e_cluster.gpu_pod_manifest(
        p.name, namespace=NAMESPACE, gpus=p.gpus, milli=p.milli, mem_mib=p.mem_mib,
        labels={"app.kubernetes.io/part-of": "sparse-demo"},
        annotations={ANN_JOB_CLASS: p.job_class},
    )


# --------------------------------------------------------------------------------------------
# what landed where (pure: API objects in, rows out)


@dataclass
class Placement:
    pod: str
    job_class: str
    asks: str
    node: str | None
    gpus: list[str] = field(default_factory=list)  # "index (uuid prefix)"
    shares_with: list[str] = field(default_factory=list)
    reason: str = ""


def gpu_indexes(nodes: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, int]]:
    """GPU UUID -> (node, index) from the nodes' ``sparse.io/gpu-inventory`` annotations."""
    out: dict[str, tuple[str, int]] = {}
    for node in nodes:
        ann = node["metadata"].get("annotations", {}).get(e2e_cluster.INVENTORY_ANNOTATION)
        for i, gpu in enumerate(json.loads(ann) if ann else []):
            out[gpu["uuid"]] = (node["metadata"]["name"], int(gpu.get("index", i)))
    return out


def _short(uuid: str) -> str:
    return uuid.removeprefix("GPU-")[:8]


def placements(specs: Sequence[DemoPod], pods: Sequence[Mapping[str, Any]],
               nodes: Sequence[Mapping[str, Any]],
               reasons: Mapping[str, str]) -> list[Placement]:
    """One row per demo pod, in submission order: node, GPUs (index and UUID prefix), the other
    demo pods on the same GPUs, or why it is still pending."""
    index = gpu_indexes(nodes)
    by_name = {p["metadata"]["name"]: p for p in pods}
    gpus_of: dict[str, list[str]] = {}
    for name, pod in by_name.items():
        uuids = pod["metadata"].get("annotations", {}).get(ANN_GPU_UUIDS, "")
        gpus_of[name] = [u for u in uuids.split(",") if u]
    rows = []
    for spec in specs:
        pod = by_name.get(spec.name)
        node = pod["spec"].get("nodeName") if pod else None
        row = Placement(spec.name, spec.job_class, spec.asks, node)
        if node is None:  # the scheduler's summary, without its preemption post-script
            reason = reasons.get(spec.name, "waiting for the scheduler")
            row.reason = reason.split(". ")[0].rstrip(".") + "."
        for uuid in gpus_of.get(spec.name, []):
            _, i = index.get(uuid, (node, -1))
            row.gpus.append(f"{i} ({_short(uuid)})")
            row.shares_with += [other for other, theirs in gpus_of.items()
                                if other != spec.name and uuid in theirs]
        rows.append(row)
    return rows


def inspect_rows(view: Mapping[str, Any]) -> list[list[str]]:
    """The extender's /inspect JSON as table rows: one per GPU with what is booked on it."""
    rows = []
    for node in view["nodes"]:
        for i, gpu in enumerate(node["gpus"]):
            pods = "\n".join(f"{p['pod'].split('/')[-1]} ({p['job_class']}, {p['milli'] / 10:g}%,"
                              f" {p['memory_mib'] / 1024:g} GiB, {p['state']})"
                              for p in gpu["pods"])
            rows.append([node["name"], str(i), _short(gpu["uuid"]), gpu["model"],
                         f"{gpu['memory_reserved_mib'] / 1024:g} / {gpu['memory_mib'] / 1024:g}",
                         f"{gpu['milli_reserved'] / 10:g}%", pods or "-"])
    return rows


def speed_kept(view: Mapping[str, Any], pair: Any) -> dict[str, float]:
    """Per pod, the fraction of its solo speed it keeps next to its GPU's co-runners, by the
    extender's pairwise model: a job of class a keeps ``pair(a, b) ** f_b`` next to a job of
    class b that uses f_b of the GPU (the worst of its GPUs for a multi-GPU pod)."""
    out: dict[str, float] = {}
    for node in view["nodes"]:
        for gpu in node["gpus"]:
            for me in gpu["pods"]:
                kept = 1.0
                for other in gpu["pods"]:
                    if other["uid"] != me["uid"]:
                        kept *= pair(me["job_class"], other["job_class"]) ** (other["milli"] / 1000)
                name = me["pod"].split("/")[-1]
                out[name] = min(out.get(name, 1.0), kept)
    return out


# --------------------------------------------------------------------------------------------
# output


def render(rows: Sequence[Placement], view: Mapping[str, Any], kept: Mapping[str, float],
           timings: Mapping[str, float], console: Any) -> None:
    from rich.table import Table

    t = Table(title="Where each pod landed (kube-scheduler + sparse extender)",
              title_justify="left")
    for col in ("pod", "class", "asks", "node", "GPU (index, UUID)", "shares the GPU with",
                "speed kept"):
        t.add_column(col, overflow="fold")
    for r in rows:
        if r.node is None:
            t.add_row(r.pod, r.job_class, r.asks, "[yellow]Pending[/]",
                      f"[yellow]{r.reason}[/]", "", "")
        else:
            t.add_row(r.pod, r.job_class, r.asks, r.node, ", ".join(r.gpus) or "-",
                      ", ".join(dict.fromkeys(r.shares_with)) or "-",
                      f"{kept.get(r.pod, 1.0):.0%}")
    console.print(t)
    console.print("speed kept: of the pod's solo speed, next to its GPU's co-runners "
                  "(pairwise model the extender places by, Gavel V100 measurements)")
    v = Table(title=f"GET /scheduler/inspect (ledger version {view['version']}, policy "
                    f"{view['policy']})", title_justify="left")
    for col in ("node", "GPU", "UUID", "model", "memory GiB", "compute", "booked by"):
        v.add_column(col, overflow="fold")
    for row in inspect_rows(view):
        v.add_row(*row)
    console.print(v)
    console.print("  ".join(f"{k}: {s:.1f} s" for k, s in timings.items()))


# --------------------------------------------------------------------------------------------
# the run


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def _pending_reasons(c: e2e_cluster.LocalCluster) -> dict[str, str]:
    events = c.request("GET", f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
    latest: dict[str, tuple[str, str]] = {}
    for e in events:
        if e.get("reason") != "FailedScheduling":
            continue
        name = e["involvedObject"]["name"]
        when = e.get("lastTimestamp") or e.get("eventTime") or ""
        if name not in latest or when >= latest[name][0]:
            latest[name] = (when, e.get("message", ""))
    return {name: msg for name, (_, msg) in latest.items()}


def _wait_settled(c: e2e_cluster.LocalCluster, timeout: float) -> None:
    """Until every demo pod is bound or has been found unschedulable (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = c.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        unbound = {p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")}
        if not unbound or unbound <= set(_pending_reasons(c)):
            return
        time.sleep(0.25)


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from extender_proc import Extender
    from rich.console import Console

    stream = sys.stderr if args.json else sys.stdout  # --json: tables and progress off stdout
    console = Console(stderr=args.json, width=None if stream.isatty() else 150)
    missing = e2e_cluster.missing_binaries()
    if missing:
        console.print(f"[red]missing {', '.join(map(str, missing))}[/]: run `make control-plane` "
                      "(builds etcd, kube-apiserver and kube-scheduler from the Go module proxy; "
                      "10-25 min cold on 2 cores, then cached)")
        return 1
    signal.signal(signal.SIGTERM, _sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored
    started = time.monotonic()
    timings: dict[str, float] = {}
    c = e2e_cluster.LocalCluster(keep_workdir=args.keep or None, quiet=not args.keep)
    ext: Extender | None = None
    try:
        with console.status("starting etcd and kube-apiserver"):
            c.start()
            for n in NODES:
                c.create_gpu_node(n.name, gpus=n.gpus, model=n.model, memory_mib=n.memory_mib)
            c.request("POST", "/api/v1/namespaces",
                      {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        timings["control plane"] = time.monotonic() - started
        with console.status("starting sparse-extender --kubeconfig and kube-scheduler"):
            ext = Extender(c.workdir, c.kubeconfig).start()
            c.start_scheduler(ext.url)
        timings["extender + scheduler"] = time.monotonic() - started - timings["control plane"]
        console.print(f"[green]up[/]: {len(NODES)} fake GPU nodes "
                      f"({', '.join(f'{n.name} {n.gpus}x{n.model}' for n in NODES)}), "
                      f"extender {ext.url}")
        t0 = time.monotonic()
        with console.status(f"submitting {len(PODS)} pods to sparse-scheduler"):
            for p in PODS:
                c.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod_manifest(p))
            _wait_settled(c, args.timeout)
        timings["placing pods"] = time.monotonic() - t0
        timings["total"] = time.monotonic() - started
        pods = c.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        nodes = c.request("GET", "/api/v1/nodes")["items"]
        rows = placements(PODS, pods, nodes, _pending_reasons(c))
        view = _get_json(f"{ext.url}/inspect")
        kept = speed_kept(view, default_matrix().pair)
        if args.json:
            print(json.dumps({"placements": [r.__dict__ for r in rows], "inspect": view,
                              "speed_kept": kept, "timings_s": timings}, indent=2))
        else:
            render(rows, view, kept, timings, console)
        if args.exit:
            return 0
        kubectl = e2e_cluster.kubectl_path() or "kubectl"
        console.print(
            f"\nThe cluster stays up. In another shell:\n"
            f"  export KUBECONFIG={c.kubeconfig}\n"
            f"  {kubectl} -n {NAMESPACE} get pods -o wide\n"
            f"  curl -s {ext.url}/inspect\n"
            f"  curl -s {ext.url.rsplit('/', 1)[0]}/metrics | grep ^sparse_\n"
            f"Logs: {c.logs_dir} and {ext.log_path}. Ctrl-C stops everything.")
        while True:
            time.sleep(1)
            dead = [p.name for p in c.processes if not p.alive()]
            if ext.proc is not None and ext.proc.poll() is not None:
                dead.append("sparse-extender")
            if dead:
                console.print(f"[red]{', '.join(dead)} exited[/]; stopping")
                return 1
    except KeyboardInterrupt:
        console.print("\nstopping")
        return 0
    except (e2e_cluster.ClusterError, RuntimeError) as err:
        console.print(f"[red]demo failed[/]: {err}")
        return 1
    finally:
        if ext is not None:
            ext.stop()
        c.stop()
        console.print("stopped etcd, kube-apiserver, kube-scheduler and sparse-extender"
                      + (f"; kept {c.workdir}" if c.keep_workdir else ""))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/demo.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exit", action="store_true",
                        help="tear down right after printing (default: stay up until Ctrl-C)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, kubeconfig)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for the pods to settle")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
