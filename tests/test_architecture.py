"""The pure core stays pure: importing it pulls in no transport, store or cluster client."""

from __future__ import annotations

import subprocess
import sys

import pytest

PURE = [
    "extender.protocol",
    "extender.inventory",
    "extender.demand",
    "extender.quantity",
    "extender.ledger.rules",
    "extender.placement",
    "extender.interference",
    "extender.kube.assignment",
    "extender.queueorder",
    "webhook.patch",
    "predictor.features",
    "controller.prediction",
    "controller.pods",
    "controller.status",
    "controller.queue",
    "controller.reconcile",
]
FORBIDDEN = ["aiohttp", "redis", "kubernetes_asyncio", "prometheus_client", "torch"]


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_io_library(module):
    code = (
        f"import sys, {module}\n"
        f"bad = [m for m in {FORBIDDEN!r} if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "", f"{module} imports {out}"
