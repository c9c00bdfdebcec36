"""Every command-line entry point answers --version with the package version."""

from __future__ import annotations

import importlib
from importlib.metadata import version

import pytest
from click.testing import CliRunner

CLIS = {
    "sparse-extender": "extender.cli:main",
    "sparse-predictor": "predictor.cli:main",
    "sparse-agent": "agent.cli:main",
    "sparse-bench": "bench.cli:main",
    "sparse-webhook": "webhook.cli:webhook",
}


@pytest.mark.parametrize("prog", sorted(CLIS))
def test_version_flag(prog: str) -> None:
    module, attr = CLIS[prog].split(":")
    command = getattr(importlib.import_module(module), attr)
    result = CliRunner().invoke(command, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{prog}, version {version('sparse')}"


def test_every_console_script_is_covered() -> None:
    import tomllib
    from pathlib import Path

    scripts = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert scripts["project"]["scripts"] == CLIS
