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
    DEFAULT_REDIS_SOCKET_TIMEOUT_S,
    DEFAULT_RESERVATION_TTL_S,
    Settings,
)
from extender.errors import SparseError
from extender.placement.policies import REGISTRY
from webhook import cli as webhook_cli

_file = click.Path(dir_okay=False, path_type=Path)


@click.group()
@click.version_option(package_name="sparse")
def main() -> None:
    """sparse: interference-aware GPU sharing for kube-scheduler."""


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
@click.option("--max-body-mib", default=DEFAULT_MAX_BODY_MIB, show_default=True, type=int)
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
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--log-format", default="json", show_default=True,
              type=click.Choice(["json", "text"]))
def serve(**options: object) -> None:
    """Run the extender HTTP service."""
    from aiohttp import web

    from extender.http.app import make_app

    logs.setup(str(options.pop("log_level")), str(options.pop("log_format")))
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
    )  # type: ignore[arg-type]
    errors = settings.validate()
    if errors:
        raise click.UsageError("\n".join(errors))
    use_fast_event_loop()
    try:
        app = make_app(settings)
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

if __name__ == "__main__":
    main()
