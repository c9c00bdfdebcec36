"""``sparse-agent`` command line: the node agent (one per GPU node, a DaemonSet).

    sparse-agent run --node-name "$NODE_NAME" --in-cluster --metrics-port 9400
    sparse-agent run --node-name gpu-0 --kubeconfig kc --fake-gpus 4 --fake-model V100M16
    sparse-agent discover [--fake-gpus 2]        # print what would be published, no cluster
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import click

from agent import discovery

log = logging.getLogger("sparse.agent")


def _fake_options(f: Any) -> Any:
    f = click.option("--fake-memory-mib", default=16384, show_default=True, type=int,
                     help="Memory of each fake GPU.")(f)
    f = click.option("--fake-model", default="V100M16", show_default=True,
                     help="Model of the fake GPUs.")(f)
    f = click.option("--fake-gpus", type=click.IntRange(0, 64), default=None,
                     help="Do not use NVML: pretend the node has N GPUs (tests, local cluster).")(f)
    return f


def _source(node: str, fake_gpus: int | None, fake_model: str, fake_memory_mib: int) -> Any:
    if fake_gpus is not None:
        from agent.fake import FakeSource

        try:
            return FakeSource(node, fake_gpus, model=fake_model, memory_mib=fake_memory_mib)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
    from agent.nvml import NvmlUnavailable, open_nvml

    try:
        return open_nvml()
    except NvmlUnavailable as exc:
        click.echo(f"sparse-agent: {exc}", err=True)
        sys.exit(3)


@click.group()
@click.version_option(package_name="sparse", prog_name="sparse-agent")
def main() -> None:
    """sparse node agent: publishes the node's GPUs for the sparse scheduler extender."""


@main.command()
@click.option("--node-name", default="local", show_default=True)
@_fake_options
def discover(node_name: str, fake_gpus: int | None, fake_model: str, fake_memory_mib: int) -> None:
    """Print the annotation and status patches this node would get; talks to no cluster."""
    source = _source(node_name, fake_gpus, fake_model, fake_memory_mib)
    try:
        devices = source.devices()
    finally:
        source.close()
    click.echo(json.dumps({
        "devices": [{"uuid": d.uuid, "index": d.index, "name": d.name, "model": d.model,
                     "memory_mib": d.memory_mib, "mig_enabled": d.mig_enabled} for d in devices],
        "annotation_patch": discovery.annotation_patch(devices),
        "status_patch": discovery.status_patch(devices, whole_gpus=False),
    }, indent=1))


@main.command()
@click.option("--node-name", envvar="NODE_NAME", required=True,
              help="This node (env NODE_NAME; in a DaemonSet from spec.nodeName).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--in-cluster", is_flag=True, help="Use the pod's service account.")
@_fake_options
@click.option("--advertise-whole-gpus", is_flag=True,
              help="Also set nvidia.com/gpu capacity (off: the NVIDIA device plugin owns it).")
@click.option("--metrics-host", default="0.0.0.0", show_default=True)
@click.option("--metrics-port", default=9400, show_default=True, type=int,
              help="Prometheus /metrics port; 0 disables it.")
@click.option("--sample-interval", default=5.0, show_default=True, type=float,
              help="Seconds between utilisation samples.")
@click.option("--publish-interval", default=60.0, show_default=True, type=float,
              help="Seconds between re-checks of the Node (re-asserts the resources after a "
                   "kubelet restart wiped them).")
@click.option("--once", is_flag=True, help="Publish once and exit (no metrics server).")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
def run(node_name: str, kubeconfig: Path | None, in_cluster: bool, fake_gpus: int | None,
        fake_model: str, fake_memory_mib: int, advertise_whole_gpus: bool, metrics_host: str,
        metrics_port: int, sample_interval: float, publish_interval: float, once: bool,
        log_level: str) -> None:
    """Discover GPUs, publish them on the Node, export live use as Prometheus metrics."""
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if in_cluster == (kubeconfig is not None):
        raise click.UsageError("give exactly one of --kubeconfig and --in-cluster")
    if sample_interval <= 0 or publish_interval <= 0:
        raise click.UsageError("intervals must be positive")
    source = _source(node_name, fake_gpus, fake_model, fake_memory_mib)
    try:
        rc = asyncio.run(_run(source, node_name, str(kubeconfig) if kubeconfig else None,
                              in_cluster, advertise_whole_gpus, metrics_host, metrics_port,
                              sample_interval, publish_interval, once))
    finally:
        source.close()
    sys.exit(rc)


async def _run(source: Any, node: str, kubeconfig: str | None, in_cluster: bool,
               whole_gpus: bool, metrics_host: str, metrics_port: int, sample_interval: float,
               publish_interval: float, once: bool) -> int:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    from agent.kube import api_client, publish
    from agent.metrics import AgentMetrics

    devices = source.devices()
    skipped = [d.uuid for d in devices if d.mig_enabled]
    if skipped:
        log.warning("MIG is enabled on %s: not offered for sharing", ", ".join(skipped))
    log.info("node %s: %d GPU(s): %s", node, len(devices),
             ", ".join(f"{d.index}:{d.model}:{d.memory_mib}MiB" for d in devices) or "none")
    metrics = AgentMetrics()
    api = await api_client(kubeconfig, in_cluster)
    async with api:
        core = client.CoreV1Api(api)
        if once:
            await publish(core, node, devices, whole_gpus=whole_gpus)
            return 0
        if metrics_port:
            from prometheus_client import start_http_server

            start_http_server(metrics_port, metrics_host, registry=metrics.registry)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        next_publish = 0.0
        while not stop.is_set():
            metrics.update(node, devices, source.samples(devices))
            if loop.time() >= next_publish:
                try:
                    await publish(core, node, devices, whole_gpus=whole_gpus)
                    metrics.publishes.labels("ok").inc()
                    next_publish = loop.time() + publish_interval
                except (ApiException, OSError) as exc:  # API down or Node not there yet: retry
                    metrics.publishes.labels("error").inc()
                    log.warning("publishing to node %s failed: %s", node,
                                getattr(exc, "reason", exc))
                    next_publish = loop.time() + min(publish_interval, 5.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), sample_interval)
    return 0


if __name__ == "__main__":
    main()
