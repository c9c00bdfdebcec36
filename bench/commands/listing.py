"""`sparse-bench list`: known workloads and policies."""

from __future__ import annotations

import json

import click


@click.command("list")
def list_() -> None:
    """Known workloads and policies."""
    from bench.sim.trace import WORKLOADS
    from extender.placement.policies import REGISTRY

    click.echo(json.dumps({"workloads": WORKLOADS, "policies": sorted(REGISTRY)}, indent=1))
