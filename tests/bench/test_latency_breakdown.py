"""bench.latency.breakdown prints each step of the request path per pod, and leaves the
functions it wrapped as they were."""

from __future__ import annotations

from click.testing import CliRunner

from bench.latency.breakdown import main
from extender.verbs.nodecache import NodeVerdicts


def test_breakdown_prints_the_steps_and_unwraps_them() -> None:
    fits = NodeVerdicts.fits
    out = CliRunner().invoke(main, ["--nodes", "20", "--gpus", "2", "--candidates", "10",
                                    "--requests", "20"])
    assert out.exit_code == 0, out.output
    for step in ("extender: server handler", "filter verb", "fit verdicts",
                 "cost verdicts", "prioritize verb", "null: server handler",
                 "plain (no wrappers)"):
        assert step in out.output
    assert NodeVerdicts.fits is fits
