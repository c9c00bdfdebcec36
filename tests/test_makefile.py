"""`make help` lists every target a user can run."""

from __future__ import annotations

import re
from pathlib import Path

MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"


def test_help_lists_every_target() -> None:
    text = MAKEFILE.read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):(?!=)", text, flags=re.M)) - {"help"}
    helped = set(re.findall(r'^\t@echo "make ([a-z0-9-]+)', text, flags=re.M))
    assert targets, "no targets parsed"
    assert targets - helped == set(), f"targets missing from `make help`: {targets - helped}"
    assert helped - targets == set(), f"`make help` lists unknown targets: {helped - targets}"


def test_run_needs_no_system_packages() -> None:
    """`make run` must not reach apt (it needs no Redis and no root)."""
    rules = dict(re.findall(r"^([a-z$()_A-Z-]+):([^\n]*)", MAKEFILE.read_text(), flags=re.M))
    assert "system-deps" not in rules["run"]
    assert "setup" not in rules["run"].split()
