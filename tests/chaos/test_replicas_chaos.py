"""Short form of the replica chaos run (the long one: ``make chaos-replicas``): a few hundred
binds through three extender processes sharing Redis behind real sentinels, with a replica
kill -9, a Redis restart and a Sentinel failover in the middle. Behaviour only, no timing."""

from __future__ import annotations

import pytest

from chaos.replicas_driver import run_chaos


@pytest.mark.slow  # about a minute: make test-slow (and CI) run it
async def test_replica_chaos_short_form(tmp_path) -> None:
    fig = await run_chaos(tmp_path, binds=200, in_flight=40, nodes=6, gpus=4)
    print("\n".join(fig.lines()))
    assert fig.bound > 0
    assert fig.server_errors == 0
    assert fig.over_commits == 0 and fig.store_over_capacity == 0
    assert fig.views_differing == 0
    assert fig.left_by_errors == 0
    assert set(fig.recoveries) == {"replica kill -9 -> ready", "redis restart -> binding",
                                   "sentinel failover -> binding"}
