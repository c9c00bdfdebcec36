"""sparse-bench: trace-driven experiments on the extender's placement core.

    sparse-bench fgd --workload default --policy fgd --policy sparse --seeds 42-51 -j 2
    sparse-bench replay --policy kube-exclusive --policy sparse --seeds 42

The group lives here; each command lives in its own module under ``bench/commands/``.
"""

from __future__ import annotations

import click

from bench.commands.common import parse_seeds
from bench.commands.fgd import fgd
from bench.commands.interference import interference
from bench.commands.listing import list_
from bench.commands.locality import locality, locality_sweep
from bench.commands.losses import losses
from bench.commands.replay import replay
from bench.commands.report import report
from bench.commands.variants import variants

__all__ = ["main", "parse_seeds"]


@click.group()
@click.version_option(package_name="sparse", prog_name="sparse-bench")
def main() -> None:
    """Trace-driven benchmarks of sparse's placement core (FGD protocol, time replay)."""


for command in (fgd, variants, losses, replay, locality, locality_sweep, report, interference,
                list_):
    main.add_command(command)


if __name__ == "__main__":
    main()
