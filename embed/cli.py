"""``sparse-embed``: load tables into the store, run a node's cache agent, find the store.

    sparse-embed load --store redis://store:6379/0 model.pt --dtype float16
    sparse-embed cache --cache unix:///var/run/sparse-embed/redis.sock --store redis://... \
        --node "$NODE_NAME" --in-cluster --metrics-port 9475 \
        --tier-dir /var/run/sparse-embed/tier --tier-mib 1024
    sparse-embed where --store embedding-store --namespace ml --kubeconfig ~/.kube/config
    sparse-embed tables --store redis://store:6379/0
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import click

from embed.layout import DTYPES, TableMeta


@click.group()
@click.version_option(package_name="sparse", prog_name="sparse-embed")
def main() -> None:
    """Embedding store, node cache and locality tools of sparse."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--store", "store_url", required=True, envvar="SPARSE_EMBED_STORE",
              help="redis://, unix:// or redis+cluster:// URL of the embedding store.")
@click.option("--match", default="*", show_default=True,
              help="Glob over state-dict keys / .npz names to load.")
@click.option("--dtype", type=click.Choice(sorted(DTYPES)), default="float32",
              show_default=True, help="Stored precision (float16 halves memory and traffic).")
@click.option("--block-rows", default=1, show_default=True, type=click.IntRange(1, 4096),
              help="Rows per Redis key.")
@click.option("--partitions", default=1, show_default=True, type=click.IntRange(1, 1024),
              help="Hash-tag partitions per table (spread a table over cluster shards).")
@click.option("--prefix", default="", help="Prefix added to every table name.")
def load(path: Path, store_url: str, match: str, dtype: str, block_rows: int, partitions: int,
         prefix: str) -> None:
    """Load the embedding tables of a state dict (.pt) or NumPy file (.npy/.npz)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    from embed.load import sources
    from embed.store import EmbeddingStore

    store = EmbeddingStore.from_url(store_url)
    found = sources(path, match)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns) as progress:
        for src in found:
            meta = TableMeta(prefix + src.table, src.rows, src.dim, dtype, block_rows,
                             partitions)
            task = progress.add_task(f"{meta.name} ({src.rows}x{src.dim})", total=src.rows)
            store.write_table(meta, src.chunks(), lambda n, t=task: progress.advance(t, n))
    click.echo(json.dumps({"tables": [prefix + s.table for s in found]}))


@main.command()
@click.option("--store", "store_url", required=True, envvar="SPARSE_EMBED_STORE")
def tables(store_url: str) -> None:
    """List the store's tables."""
    from embed.store import EmbeddingStore

    for meta in EmbeddingStore.from_url(store_url).tables():
        click.echo(json.dumps(meta.__dict__))


def _kube_options(f):
    f = click.option("--kubeconfig", type=click.Path(dir_okay=False))(f)
    return click.option("--in-cluster", is_flag=True)(f)


@main.command()
@click.option("--cache", "cache_url", required=True, envvar="SPARSE_EMBED_CACHE",
              help="URL of the node-local redis-server (unix:// socket or redis://).")
@click.option("--store", "store_url", envvar="SPARSE_EMBED_STORE",
              help="Store URL, for table sizes in the published content.")
@click.option("--node", envvar="NODE_NAME", required=True, help="This node's name.")
@click.option("--maxmemory", default=None, help="Set the cache's maxmemory (e.g. 8gb) and "
              "allkeys-lfu at start (when the server was not started with them).")
@click.option("--metrics-port", default=9475, show_default=True, type=int)
@click.option("--publish-interval", default=30.0, show_default=True,
              help="Least seconds between two Node patches.")
@click.option("--readers/--no-readers", default=True, show_default=True,
              help="Publish the readers per table (pods on this node that declare it; one pod "
              "list per publish interval; needs RBAC list on pods).")
@click.option("--tier-dir", default=None, envvar="SPARSE_EMBED_TIER",
              help="Folder (on the node's tmpfs) for the shared-memory tier's snapshots.")
@click.option("--tier-mib", default=0, show_default=True, type=click.IntRange(0),
              help="Memory of the shared-memory tier (0 = no tier; needs --store).")
@click.option("--tier-interval", default=30.0, show_default=True,
              help="Seconds between two tier refreshes.")
@_kube_options
def cache(cache_url, store_url, node, maxmemory, metrics_port, publish_interval, readers,
          tier_dir, tier_mib, tier_interval, kubeconfig, in_cluster) -> None:
    """Run a node's cache agent: metrics, the Node annotation for the scheduler and the
    shared-memory tier of the hottest rows."""
    from prometheus_client import start_http_server

    from embed.cache import LFU_SETTINGS
    from embed.metrics import CacheCollector
    from embed.publisher import CachePublisher, count_rows, node_readers, store_row_bytes
    from embed.store import EmbeddingStore, connect
    from embed.tier import TierBuilder
    from extender.telemetry import new_registry

    local = connect(cache_url)
    if maxmemory:
        local.config_set("maxmemory", maxmemory)
        for name, value in LFU_SETTINGS.items():
            local.config_set(name, value)
    store = EmbeddingStore.from_url(store_url) if store_url else None
    tier = None
    if tier_mib:
        if store is None or not tier_dir:
            raise click.UsageError("--tier-mib needs --store and --tier-dir")
        tier = TierBuilder(local, store.meta, tier_dir, tier_mib * 2**20)
    row_bytes = store_row_bytes(store)  # stated while the cache holds nothing yet
    publisher = CachePublisher(node, lambda: count_rows(local, store,
                                                        default_row_bytes=row_bytes),
                               min_interval_s=publish_interval,
                               readers=(lambda core: node_readers(core, node)) if readers
                               else None)
    registry = new_registry("embed")
    registry.register(CacheCollector(local, lambda: dict(publisher.last.rows)
                                     if publisher.last else {},
                                     (lambda: dict(tier.held)) if tier is not None else None))
    start_http_server(metrics_port, registry=registry)
    asyncio.run(_agent(publisher, tier, tier_interval, kubeconfig, in_cluster))


async def _agent(publisher, tier, tier_interval, kubeconfig, in_cluster) -> None:
    if tier is None:
        await _publish_forever(publisher, kubeconfig, in_cluster)
        return
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(_publish_forever(publisher, kubeconfig, in_cluster))
        tasks.create_task(_refresh_tier_forever(tier, tier_interval))


async def _refresh_tier_forever(tier, interval_s: float) -> None:
    log = logging.getLogger("sparse.embed.tier")
    while True:
        try:
            held = await asyncio.to_thread(tier.refresh)
            log.info("shared-memory tier: %s", ", ".join(f"{t}={n}" for t, n in
                                                         sorted(held.items())) or "empty")
        except Exception as exc:  # the cache restarting or a full tmpfs: try next time
            log.warning("cannot refresh the shared-memory tier: %s", exc)
        await asyncio.sleep(interval_s)


async def _core(kubeconfig, in_cluster):
    from kubernetes_asyncio import client, config

    if in_cluster:
        config.load_incluster_config()
        return client.ApiClient()
    return await config.new_client_from_config(
        config_file=kubeconfig or os.path.expanduser("~/.kube/config"))


async def _publish_forever(publisher, kubeconfig, in_cluster) -> None:
    from kubernetes_asyncio import client

    api = await _core(kubeconfig, in_cluster)
    try:
        await publisher.run(client.CoreV1Api(api))
    finally:
        await api.close()


@main.command()
@click.option("--store", required=True, help="Store name (Service / pod label value).")
@click.option("--namespace", default=None, help="Namespace of the store's Service.")
@click.option("--rack-label", default="topology.sparse.io/rack", show_default=True)
@_kube_options
def where(store, namespace, rack_label, kubeconfig, in_cluster) -> None:
    """Where the store's shards run: node, zone and rack per shard."""
    from kubernetes_asyncio import client

    from embed.topology import store_topology

    async def go():
        api = await _core(kubeconfig, in_cluster)
        try:
            return await store_topology(client.CoreV1Api(api), store, namespace, rack_label)
        finally:
            await api.close()

    places = asyncio.run(go())
    if not places:
        raise click.ClickException(f"no running shard of store {store!r} found")
    for p in places:
        click.echo(json.dumps(p.__dict__))


if __name__ == "__main__":
    main()
