"""``sparse-extender webhook``: serve the mutating admission webhook over TLS."""

from __future__ import annotations

from pathlib import Path

import click

_file = click.Path(dir_okay=False, exists=True, path_type=Path)


@click.command("webhook")
@click.version_option(package_name="sparse", prog_name="sparse-webhook")
@click.option("--host", default="0.0.0.0", show_default=True)
@click.option("--port", default=8443, show_default=True, type=int)
@click.option("--tls-cert", type=_file, required=True, help="Serving certificate (PEM).")
@click.option("--tls-key", type=_file, required=True, help="Private key of --tls-cert (PEM).")
@click.option("--scheduler-name", default="sparse-scheduler", show_default=True,
              help="schedulerName given to pods that request sparse resources.")
@click.option("--whole-gpus/--no-whole-gpus", default=False, show_default=True,
              help="Also capture pods that request only nvidia.com/gpu.")
@click.option("--mps/--no-mps", default=False, show_default=True,
              help="Inject CUDA MPS thread/memory limits (needs the MPS daemon on the node).")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
def webhook(host: str, port: int, tls_cert: Path, tls_key: Path, scheduler_name: str,
            whole_gpus: bool, mps: bool, log_level: str) -> None:
    """Run the mutating admission webhook (AdmissionReview v1, HTTPS only)."""
    import logging

    from aiohttp import web

    from webhook.app import make_app, server_ssl_context
    from webhook.patch import PatchConfig

    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    config = PatchConfig(scheduler_name=scheduler_name, whole_gpus=whole_gpus, mps=mps)
    web.run_app(make_app(config), host=host, port=port,
                ssl_context=server_ssl_context(tls_cert, tls_key), access_log=None,
                print=lambda msg: click.echo(msg, err=True))
