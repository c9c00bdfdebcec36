"""``sparse-extender`` command line."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import click

from extender import logs
from extender.config import (
    DEFAULT_BIND_TIMEOUT_S,
    DEFAULT_MAX_BODY_MIB,
    DEFAULT_MAX_BODY_MIB_NAMES,
    DEFAULT_REDIS_SOCKET_TIMEOUT_S,
    DEFAULT_RESERVATION_TTL_S,
    Settings,
)
from extender.errors import SparseError
from extender.placement.policies import REGISTRY
from webhook import cli as webhook_cli

_file = click.Path(dir_okay=False, path_type=Path)


@click.group()
@click.version_option(package_name="sparse", prog_name="sparse-extender")
def main() -> None:
    """sparse: interference-aware GPU sharing for kube-scheduler."""


def _network(path: object):
    """The locality term's network figures from ``--locality-network`` (defaults without)."""
    import yaml

    from extender.placement.step_time import NetworkModel

    if not path:
        return NetworkModel()
    with open(str(path)) as f:
        raw = yaml.safe_load(f) or {}
    try:
        return NetworkModel.from_dict(raw.get("network", raw))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--locality-network") from None


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8888, show_default=True, type=int)
@click.option("--prefix", default="/scheduler", show_default=True,
              help="URL prefix of filter/prioritize/bind/preempt (the scheduler's urlPrefix).")
@click.option("--nodes", type=_file, help="GPU inventory in node-conf.yaml format.")
@click.option("--store", default="sqlite", show_default=True,
              help="Ledger: 'sqlite' (one replica, kept across restarts in --state-dir),"
                   " 'memory' (lost at exit), redis://host:port/db or"
                   " sentinel://host:port[,host:port]/<master>[/db] (shared by replicas).")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Directory of the sqlite ledger [default: $XDG_STATE_HOME/sparse or"
                   " ~/.local/state/sparse].")
@click.option("--redis-password-file", type=_file,
              help="Password of Redis and its sentinels [default: $SPARSE_REDIS_PASSWORD].")
@click.option("--redis-socket-timeout", default=DEFAULT_REDIS_SOCKET_TIMEOUT_S,
              show_default=True, type=float,
              help="Seconds a Redis call may take; keep it below the scheduler's httpTimeout.")
@click.option("--redis-pool-size", default=64, show_default=True, type=int,
              help="Redis connections per replica; further requests wait for one.")
@click.option("--redis-min-replicas", default=0, show_default=True, type=int,
              help="Acknowledge a booking only once this many Redis replicas hold it (WAIT);"
                   " 1 with Sentinel.")
@click.option("--bind-timeout", default=DEFAULT_BIND_TIMEOUT_S, show_default=True,
              type=float, help="Seconds the Binding call may take before the bind fails.")
@click.option("--expire-interval", default=10.0, show_default=True, type=float,
              help="Seconds between expiry and upkeep rounds of the ledger.")
@click.option("--predictions", help="redis:// URL of predicted demands (default: --store's).")
@click.option("--policy", default="sparse", show_default=True,
              type=click.Choice(sorted(REGISTRY)))
@click.option("--interference", type=_file, help="Interference matrix CSV (default: Gavel V100).")
@click.option("--reservation-ttl", default=DEFAULT_RESERVATION_TTL_S, show_default=True,
              type=float, help="Seconds an unbound reservation is kept.")
@click.option("--max-body-mib", type=int,
              help=f"Largest request body, after decompression (default: "
                   f"{DEFAULT_MAX_BODY_MIB_NAMES} with --node-cache-capable, "
                   f"{DEFAULT_MAX_BODY_MIB} without).")
@click.option("--node-cache-capable/--no-node-cache-capable", default=True, show_default=True,
              help="The scheduler's nodeCacheCapable: requests carry node names, not Nodes.")
@click.option("--trust-request-inventory", is_flag=True,
              help="Let the GPU inventory annotation of a request's Nodes.items change the"
                   " inventory (off: only --nodes, the API server and the agent are trusted).")
@click.option("--metrics-port", type=int,
              help="Serve /metrics and /inspect on this port only (default: on --port).")
@click.option("--inspect/--no-inspect", default=True, show_default=True,
              help="Serve /inspect (nodes, GPUs, pod names and UIDs).")
@click.option("--max-in-flight", default=64, show_default=True, type=int,
              help="Verb requests worked on at once; more wait for a slot.")
@click.option("--queue-timeout", default=2.0, show_default=True, type=float,
              help="Seconds a request waits for a slot before it is answered with an Error.")
@click.option("--tls-cert", type=_file, help="Serve HTTPS with this certificate (PEM).")
@click.option("--tls-key", type=_file, help="Private key of --tls-cert (PEM).")
@click.option("--tls-client-ca", type=_file, help="Require client certificates signed by this CA.")
@click.option("--kubeconfig", type=_file, help="Talk to a cluster with this kubeconfig.")
@click.option("--in-cluster", is_flag=True, help="Talk to the cluster the pod runs in.")
@click.option("--pod-selector", default="spec.schedulerName=sparse-scheduler", show_default=True,
              help="Field selector of the pods to follow (those this extender schedules);"
                   " '' follows every pod.")
@click.option("--success-events/--no-success-events", default=False, show_default=True,
              help="Post a Normal event naming the GPUs of every bound pod.")
@click.option("--locality-cache-weight", default=1.0, show_default=True, type=float,
              help="Locality: cost (GPUs) a fully cached hot set is worth.")
@click.option("--locality-rack-weight", default=0.5, show_default=True, type=float,
              help="Locality: worth of a node in a rack of the embedding store's shards.")
@click.option("--locality-zone-weight", default=0.2, show_default=True, type=float,
              help="Locality: worth of a node in a zone of the embedding store's shards.")
@click.option("--locality-avoid-weight", default=0.02, show_default=True, type=float,
              help="Locality: tie-breaker keeping pods without embeddings off full caches"
                   " (between idle nodes).")
@click.option("--locality-id-skew", default=1.05, show_default=True, type=float,
              help="Locality: Zipf exponent of the tables' ids, to score a cache by the share"
                   " of lookups its rows serve (0: by row count).")
@click.option("--locality-score", default="time", show_default=True,
              type=click.Choice(["time", "share"]),
              help="Locality: score a pod declaring stepComputeMs and idsPerStep by the step time"
                   " each node saves it (time), or always by the cached share and tiers.")
@click.option("--locality-network", type=click.Path(exists=True, dir_okay=False),
              help="Locality: YAML with each path's gbps and latency_ms (local, rack, zone,"
                   " cross_zone; a topology file's 'network' section), to price the time score;"
                   " optional 'store: {gbps}', the store's egress its readers share.")
@click.option("--locality-max-wait", default=0.0, show_default=True, type=click.FloatRange(0),
              help="Locality: seconds an embedding reader may wait, from its creation,"
                   " for a node whose cache holds its tables and that is predicted to have"
                   " room sooner than the run time it saves (delay scheduling; 0: never).")
@click.option("--filter-best-within", type=click.FloatRange(0, 10),
              help="Filter answers only the nodes within this many score points (0-10) of the"
                   " best, for a scheduler config without prioritizeVerb: one round trip per"
                   " pod, kube-scheduler's own scores only choose among those (docs).")
@click.option("--filter-best-single", is_flag=True,
              help="With --filter-best-within: answer only the one best node, so that"
                   " kube-scheduler skips its own scoring (docs).")
@click.option("--rack-label", default="topology.sparse.io/rack", show_default=True,
              help="Node label naming the rack.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--log-format", default="json", show_default=True,
              type=click.Choice(["json", "text"]))
def serve(**options: object) -> None:
    """Run the extender HTTP service."""
    from aiohttp import web

    from extender.http.app import build_scheduler, make_app
    from extender.placement.locality import LocalityIndex, LocalityWeights

    logs.setup(str(options.pop("log_level")), str(options.pop("log_format")))
    locality = LocalityWeights(
        cache=options.pop("locality_cache_weight"), rack=options.pop("locality_rack_weight"),
        zone=options.pop("locality_zone_weight"), avoid=options.pop("locality_avoid_weight"),
        id_skew=options.pop("locality_id_skew"),  # type: ignore[arg-type]
        rack_label=str(options.pop("rack_label")),  # type: ignore[arg-type]
        score=str(options.pop("locality_score")),
        network=_network(options.pop("locality_network")),
        max_wait_s=float(options.pop("locality_max_wait")))  # type: ignore[arg-type]
    settings = Settings(
        host=options["host"], port=options["port"], prefix=options["prefix"],
        nodes=options["nodes"], store=options["store"], predictions=options["predictions"],
        policy=options["policy"], interference=options["interference"],
        reservation_ttl_s=options["reservation_ttl"], max_body_mib=options["max_body_mib"],
        tls_cert=options["tls_cert"], tls_key=options["tls_key"],
        tls_client_ca=options["tls_client_ca"], kubeconfig=options["kubeconfig"],
        in_cluster=bool(options["in_cluster"]), pod_selector=options["pod_selector"],
        success_events=bool(options["success_events"]),
        state_dir=options["state_dir"], redis_password_file=options["redis_password_file"],
        redis_socket_timeout_s=options["redis_socket_timeout"],
        redis_pool_size=options["redis_pool_size"], bind_timeout_s=options["bind_timeout"],
        expire_interval_s=options["expire_interval"],
        redis_min_replicas=options["redis_min_replicas"],
        node_cache_capable=bool(options["node_cache_capable"]),
        trust_request_inventory=bool(options["trust_request_inventory"]),
        metrics_port=options["metrics_port"], inspect=bool(options["inspect"]),
        max_in_flight=options["max_in_flight"], queue_timeout_s=options["queue_timeout"],
        filter_best_within=options["filter_best_within"],
        filter_best_single=bool(options["filter_best_single"]),
        start_price_worker=True,
    )  # type: ignore[arg-type]
    errors = settings.validate()
    if errors:
        raise click.UsageError("\n".join(errors))
    use_fast_event_loop()
    try:
        scheduler = build_scheduler(settings)
        scheduler.locality = LocalityIndex(locality)
        app = make_app(settings, scheduler)
    except SparseError as exc:
        raise click.ClickException(str(exc)) from exc
    web.run_app(app, host=settings.host, port=settings.port, ssl_context=ssl_context(settings),
                access_log=None, print=lambda msg: click.echo(msg, err=True))


def use_fast_event_loop() -> None:
    """uvloop when installed (a dependency on Linux): the extender spends a fifth of its time
    in the event loop's socket writes at a hundred pods per second."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    if settings.tls_cert is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(settings.tls_cert, settings.tls_key)
    if settings.tls_client_ca is not None:
        context.load_verify_locations(settings.tls_client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context

main.add_command(webhook_cli.webhook)


@main.command("pair-worker")
@click.option("--prometheus", required=True, help="Prometheus base URL (http://host:9090).")
@click.option("--redis", "redis_url", required=True, help="redis:// URL the extender reads.")
@click.option("--interval", default=30.0, show_default=True, help="Seconds between rounds.")
@click.option("--window", default="2m", show_default=True,
              help="Range the step times are averaged over (PromQL duration).")
@click.option("--once", is_flag=True, help="One round, print its summary, exit.")
@click.option("--log-level", default="info", show_default=True)
def pair_worker(prometheus, redis_url, interval, window, once, log_level) -> None:
    """Learn pair slowdowns from jobs' step times (Prometheus) into Redis for the extender."""
    import json

    import redis.asyncio as aioredis

    from extender import pairworker

    logs.setup(str(log_level), "json")
    if once:
        async def one() -> dict:
            client = aioredis.Redis.from_url(redis_url)
            try:
                return await pairworker.run_once(prometheus, client, window)
            finally:
                await client.aclose()

        click.echo(json.dumps(asyncio.run(one())))
        return
    asyncio.run(pairworker.run_forever(prometheus, redis_url, interval, window))

if __name__ == "__main__":
    main()
