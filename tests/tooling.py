"""Where the locally built tools live (hack/build-*.sh put them under ~/.cache/sparse)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def versions() -> dict[str, str]:
    """KEY=value pairs of hack/versions.env."""
    out = {}
    for line in (ROOT / "hack" / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def helm_path() -> Path:
    """$SPARSE_HELM, else the binary hack/build-helm.sh builds for HELM_VERSION."""
    override = os.environ.get("SPARSE_HELM")
    if override:
        return Path(override)
    version = versions()["HELM_VERSION"].lstrip("v")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "sparse" / "helm" / f"v{version}" / "bin" / "helm"
