"""``sparse-agent`` CLI: fake mode, the clear NVML error, argument checks."""

from __future__ import annotations

import json
import sys

from click.testing import CliRunner

from agent.cli import main
from extender.annotations import ANN_GPU_INVENTORY, RES_GPU_MEM, RES_GPU_MILLI


def test_discover_fake() -> None:
    res = CliRunner().invoke(main, ["discover", "--node-name", "n1", "--fake-gpus", "4",
                                    "--fake-model", "V100M32", "--fake-memory-mib", "32768"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert len(out["devices"]) == 4
    inv = json.loads(out["annotation_patch"]["metadata"]["annotations"][ANN_GPU_INVENTORY])
    assert [g["model"] for g in inv] == ["V100M32"] * 4
    assert out["status_patch"]["status"]["capacity"] == {RES_GPU_MILLI: "4000",
                                                         RES_GPU_MEM: str(4 * 32768)}


def test_without_nvml_exits_with_a_clear_message(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as if not installed
    res = CliRunner().invoke(main, ["discover"])
    assert res.exit_code == 3
    assert "pynvml is not installed" in res.output and "--fake-gpus" in res.output


def test_run_needs_exactly_one_way_to_reach_the_cluster() -> None:
    res = CliRunner().invoke(main, ["run", "--node-name", "n", "--fake-gpus", "1"])
    assert res.exit_code == 2 and "--kubeconfig" in res.output


def test_fake_gpus_bounds() -> None:
    res = CliRunner().invoke(main, ["discover", "--fake-gpus", "65"])
    assert res.exit_code == 2
