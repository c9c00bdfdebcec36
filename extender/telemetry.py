"""What every sparse ``/metrics`` endpoint has in common (tabled in docs/metrics.md).

* Base units in names and values: ``_bytes``, ``_seconds``, ``_ratio`` (0-1), ``_total``.
* No ``<name>_created`` series: they double the series count of every counter and histogram
  and nothing of ours reads them (``prometheus_client.disable_created_metrics``, process-wide).
* The process (CPU, memory, file descriptors), platform (Python version) and garbage-collector
  collectors on every registry we serve, not only on the library's global one.
* ``sparse_build_info{component, version, revision, python_version} 1``: what is running where.
"""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

BUILD_INFO = "sparse_build_info"
# Set at image build time (hack/build-images.sh passes the git commit); "unknown" otherwise.
REVISION_ENV = "SPARSE_REVISION"

disable_created_metrics()


def version() -> str:
    """The installed package's version (``sparse --version`` prints the same)."""
    try:
        return _dist_version("sparse")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def register_build_info(registry: CollectorRegistry, component: str) -> Gauge:
    """``sparse_build_info`` (value 1) on ``registry``, labelled with what is running."""
    gauge = Gauge(BUILD_INFO, "Which sparse build this process runs (always 1).",
                  ["component", "version", "revision", "python_version"], registry=registry)
    gauge.labels(component, version(), os.environ.get(REVISION_ENV) or "unknown",
                 platform.python_version()).set(1)
    return gauge


def new_registry(component: str) -> CollectorRegistry:
    """A registry with the process, platform and GC collectors and ``sparse_build_info``."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    register_build_info(registry, component)
    return registry


_global_build_info: Gauge | None = None


def standardize_global_registry(component: str) -> CollectorRegistry:
    """The library's global registry, which already carries the process, platform and GC
    collectors, plus ``sparse_build_info`` (once per process): for workers served by
    ``start_http_server``."""
    global _global_build_info
    if _global_build_info is None:
        _global_build_info = register_build_info(REGISTRY, component)
    return REGISTRY
