"""`make demo` end to end: every pod that fits is bound by the real scheduler through sparse."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cluster as e2e_cluster
import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_demo_places_every_pod_that_fits_and_cleans_up() -> None:
    if e2e_cluster.missing_binaries():
        pytest.skip("control plane not built")
    res = subprocess.run([sys.executable, str(ROOT / "hack" / "demo.py"), "--exit", "--json"],
                         capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    rows = {r["pod"]: r for r in out["placements"]}
    pending = {name for name, r in rows.items() if r["node"] is None}
    assert pending == {"embedding-giant"}, rows
    assert "40960 MiB" in rows["embedding-giant"]["reason"]
    assert len(rows["bert-large-pretrain"]["gpus"]) == 4
    assert len(rows["resnet50-train"]["gpus"]) == 1
    # The ledger agrees with the bindings: every bound demo pod is booked on its node, no GPU
    # holds more than it has.
    booked = {}
    for node in out["inspect"]["nodes"]:
        for gpu in node["gpus"]:
            assert gpu["memory_reserved_mib"] <= gpu["memory_mib"]
            assert gpu["milli_reserved"] <= 1000
            for p in gpu["pods"]:
                booked.setdefault(p["pod"].split("/")[-1], set()).add(node["name"])
    assert {name: {r["node"]} for name, r in rows.items() if r["node"]} == booked
    assert "stopped etcd" in res.stderr
