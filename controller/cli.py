"""``sparse-controller``: run the RecommendDLJob controller."""

from __future__ import annotations

import logging
import socket
import zlib
from pathlib import Path

import click

from controller.reconcile import Config
from extender.queueorder import DurationBands


def default_priority() -> int:
    """Distinct per replica (kopf freezes replicas of equal priority): from the host name."""
    return 100 + zlib.crc32(socket.gethostname().encode()) % 900


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sparse", prog_name="sparse-controller")
@click.option("--extender-url", required=True, envvar="SPARSE_EXTENDER_URL",
              help="The extender's verb prefix, e.g. http://sparse-extender:8888/scheduler.")
@click.option("--extender-ca", type=click.Path(exists=True, dir_okay=False), default=None,
              help="CA bundle of the extender's HTTPS certificate (https:// URLs).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path),
              envvar="KUBECONFIG", default=None, help="Default: the in-cluster service account.")
@click.option("--namespace", "namespaces", multiple=True,
              help="Watch only these namespaces (repeatable); default: all.")
@click.option("--peering", default=None,
              help="Peering name shared by the replicas; without it the controller runs alone.")
@click.option("--priority", type=int, default=None,
              help="Peering priority (highest active replica works); default from host name.")
@click.option("--scheduler-name", default="sparse-scheduler", show_default=True)
@click.option("--slot-ttl", type=float, default=120.0, show_default=True,
              help="Seconds a gang's slots wait for their pods to bind before expiring.")
@click.option("--max-pass-over", type=float, default=300.0, show_default=True,
              help="Seconds younger jobs may be admitted past a waiting one (backfill bound).")
@click.option("--queue-order", default="off", show_default=True,
              type=click.Choice(["off", "longest-first", "shortest-first", "critical-first",
                                 "latest-start"]),
              help="Queue jobs by predicted-duration band (spec.steps x predicted step time): "
              "workers get the band's PriorityClass, which must exist (the chart installs "
              "them); critical-first: the longest band, then the others shortest first; "
              "latest-start: shortest first, and a job whose latest start has come (it may "
              "run longer than the submitted work takes to drain) ahead of them all; off: "
              "FIFO, no class set.")
@click.option("--queue-bands", type=int, default=4, show_default=True,
              help="Number of bands, log-spaced over --queue-band-range.")
@click.option("--queue-band-range", default="60:14400", show_default=True,
              help="Shortest:longest predicted duration (seconds) the bands split.")
@click.option("--queue-priority-base", type=int, default=1000, show_default=True,
              help="Priority value of the first band; band i of n is base + i (longest-first)"
              ", base + n - 1 - i (shortest-first), or base + n - 1 for the last band and "
              "base + n - 2 - i for the others (critical-first).")
@click.option("--queue-critical-bands", type=click.IntRange(1, 16), default=None,
              help="critical-first: how many of the longest bands go first; default: the "
              "longest plus those within the predictor's x2 error of it (2 of 4 bands over "
              "60 s..4 h).")
@click.option("--priority-class-prefix", default="sparse-duration", show_default=True,
              help="Band i's PriorityClass is <prefix>-<i> (0: shortest jobs).")
@click.option("--interval", type=float, default=5.0, show_default=True,
              help="Seconds between reconcile passes of each job.")
@click.option("--pod-delete-grace", type=int, default=None,
              help="Grace period when deleting worker pods; default: the pod's own.")
@click.option("--liveness", default=None, help="e.g. http://0.0.0.0:8080/healthz")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
def main(extender_url: str, extender_ca: str | None, kubeconfig: Path | None,
         namespaces: tuple[str, ...], peering: str | None, priority: int | None,
         scheduler_name: str, slot_ttl: float,
         max_pass_over: float, queue_order: str, queue_bands: int, queue_band_range: str,
         queue_priority_base: int, queue_critical_bands: int | None,
         priority_class_prefix: str, interval: float,
         pod_delete_grace: int | None, liveness: str | None, log_level: str) -> None:
    """Predict, admit (all workers or none) and run RecommendDLJobs."""
    from controller.operator import Options, run

    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if log_level != "debug":  # kopf reports every timer run and probe at info
        for noisy in ("kopf.objects", "aiohttp.access"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    if slot_ttl <= 0 or interval <= 0 or max_pass_over < 0:
        raise click.BadParameter("--slot-ttl and --interval must be positive,"
                                 " --max-pass-over not negative")
    bands = duration_bands(queue_order, queue_bands, queue_band_range, queue_priority_base,
                           priority_class_prefix, queue_critical_bands)
    options = Options(
        extender_url=extender_url, kubeconfig=kubeconfig,
        config=Config(scheduler_name=scheduler_name, slot_ttl_s=slot_ttl,
                      max_pass_over_s=max_pass_over, bands=bands),
        interval_s=interval, pod_delete_grace_s=pod_delete_grace, peering=peering,
        namespaces=namespaces, extender_ca=extender_ca)
    run(options, priority=default_priority() if priority is None else priority,
        liveness=liveness)


def duration_bands(order: str, count: int, band_range: str, base: int,
                   prefix: str, critical: int | None = None) -> DurationBands | None:
    """The queue bands the options describe (None: off); a bad option is a usage error."""
    if order == "off":
        return None
    try:
        lo, _, hi = band_range.partition(":")
        return DurationBands.log_spaced(float(lo), float(hi), count, order=order,
                                        base_priority=base, prefix=prefix, critical=critical)
    except ValueError as exc:
        raise click.BadParameter(f"{exc} (from --queue-bands {count}, --queue-band-range"
                                 f" {band_range!r}, --queue-priority-base {base},"
                                 f" --queue-critical-bands {critical})") from None


if __name__ == "__main__":
    main()
