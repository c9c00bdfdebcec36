"""Every console script in pyproject.toml answers --version with the package version."""

from __future__ import annotations

import importlib
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from click.testing import CliRunner

SCRIPTS = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())[
    "project"]["scripts"]


def test_the_known_entry_points_are_listed() -> None:
    assert {"sparse-extender", "sparse-predictor", "sparse-agent", "sparse-bench",
            "sparse-webhook"} <= set(SCRIPTS)


@pytest.mark.parametrize("prog", sorted(SCRIPTS))
def test_version_flag(prog: str) -> None:
    module, attr = SCRIPTS[prog].split(":")
    command = getattr(importlib.import_module(module), attr)
    result = CliRunner().invoke(command, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{prog}, version {version('sparse')}"
