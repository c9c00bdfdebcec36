"""Fixtures for end-to-end tests against a real local control plane (tests/e2e/cluster.py).

Run with ``pytest -m e2e tests/e2e`` (the default addopts deselect ``e2e``). Binaries come from
``hack/build-control-plane.sh``. Without them the tests skip, unless ``SPARSE_E2E_REQUIRE=1``
(CI), which turns a missing build into a failure. ``SPARSE_E2E_KEEP=1`` keeps the temp dir
(logs, kubeconfig, scheduler config) for inspection.

Fixtures:
- ``cluster``          session-wide :class:`cluster.LocalCluster` (etcd + kube-apiserver)
- ``core``             ``kubernetes_asyncio`` CoreV1Api on that cluster (per test)
- ``plain_scheduler``  kube-scheduler with the ``sparse-scheduler`` profile and NO extender
- ``clean_cluster``    deletes all pods (namespace default) and nodes before the test
A failing test gets a "control-plane logs" section with the tail of every process log.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

import cluster as e2e_cluster  # noqa: E402

_ACTIVE: e2e_cluster.LocalCluster | None = None


def _required() -> bool:
    return os.environ.get("SPARSE_E2E_REQUIRE", "") not in ("", "0")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Safety net: everything under tests/e2e is e2e, even if a module forgot the marker."""
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents and not item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and _ACTIVE is not None and _HERE in Path(str(item.fspath)).resolve().parents:
        report.sections.append(("control-plane logs", _ACTIVE.log_tails()))


@pytest.fixture(scope="session")
def cluster() -> Iterator[e2e_cluster.LocalCluster]:
    global _ACTIVE
    bin_dir = e2e_cluster.default_bin_dir()
    missing = e2e_cluster.missing_binaries(bin_dir)
    if missing:
        msg = (
            f"control-plane binaries not built ({', '.join(p.name for p in missing)} missing in "
            f"{bin_dir}); run make control-plane (10-25 min cold on 2 cores)"
        )
        if _required():
            pytest.fail(f"SPARSE_E2E_REQUIRE is set: {msg}", pytrace=False)
        pytest.skip(msg)
    with e2e_cluster.LocalCluster(bin_dir) as c:
        _ACTIVE = c
        try:
            yield c
        finally:
            _ACTIVE = None


@pytest.fixture
async def core(cluster: e2e_cluster.LocalCluster) -> AsyncIterator[Any]:
    from kubernetes_asyncio import client

    api = await e2e_cluster.api_client(cluster.kubeconfig)
    async with api:
        yield client.CoreV1Api(api)


@pytest.fixture
def clean_cluster(cluster: e2e_cluster.LocalCluster) -> e2e_cluster.LocalCluster:
    cluster.reset()
    return cluster


@pytest.fixture
def plain_scheduler(cluster: e2e_cluster.LocalCluster) -> Iterator[e2e_cluster.Proc]:
    proc = cluster.start_scheduler(None)
    try:
        yield proc
    finally:
        cluster.stop_scheduler()


@pytest.fixture
def extender(cluster: e2e_cluster.LocalCluster, tmp_path: Path) -> Iterator[Any]:
    """A fresh cluster state, an in-memory extender on it and kube-scheduler pointed at it."""
    from extender_proc import Extender

    cluster.reset()
    ext = Extender(tmp_path, cluster.kubeconfig).start()
    cluster.start_scheduler(ext.url)
    try:
        yield ext
    finally:
        cluster.stop_scheduler()
        ext.stop()
