"""`make images` names what the chart deploys by default, and REGISTRY moves all three."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import tooling
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "hack" / "build-images.sh"


def _images(**env: str) -> list[str]:
    res = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={**os.environ, "DRY_RUN": "1", "BUILDER": "docker", **env})
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_default_names_are_the_charts_defaults() -> None:
    values = yaml.safe_load((ROOT / "charts" / "sparse" / "values.yaml").read_text())
    app_version = yaml.safe_load((ROOT / "charts" / "sparse" / "Chart.yaml").read_text())[
        "appVersion"]
    expected = [f"{values[c]['image']['repository']}:{values[c]['image']['tag'] or app_version}"
                for c in ("extender", "predictor", "agent")]
    assert _images() == expected


def test_registry_and_tag_override() -> None:
    assert _images(REGISTRY="registry.example.com/mirror/", TAG="dev", COMPONENTS="agent") == [
        "registry.example.com/mirror/sparse-gpu/sparse-agent:dev"]


def test_every_image_has_a_dockerfile_and_the_revision() -> None:
    for c in ("extender", "predictor", "agent"):
        text = (ROOT / "docker" / f"{c}.Dockerfile").read_text()
        assert "ENV SPARSE_REVISION=${REVISION}" in text
        assert "USER 65532:65532" in text


def test_chart_with_the_same_registry_pulls_what_make_images_pushes() -> None:
    helm = tooling.helm_path()
    if not helm.exists():
        pytest.skip("helm not built (hack/build-helm.sh)")
    k8s = tooling.versions()["K8S_VERSION"]
    res = subprocess.run(
        [str(helm), "template", "sparse", str(ROOT / "charts" / "sparse"), "-n", "sparse-system",
         "--kube-version", f"v{k8s}", "--set", "global.imageRegistry=registry.example.com/mirror"],
        capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    ours = {m for m in re.findall(r"^\s+image:\s*(\S+)", res.stdout, flags=re.M)
            if "/sparse-gpu/" in m}
    assert ours == set(_images(REGISTRY="registry.example.com/mirror"))
