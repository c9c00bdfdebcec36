"""Filter with a networked demand source: the ledger is read while the prediction is fetched,
and the answer is the same as with no predictions; a failing source fails the call."""

from __future__ import annotations

import asyncio

import pytest
from builders import gpu_node, inventory, pod

from extender.demandsource import NoPredictions
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.placement import make_policy
from extender.protocol import decode_extender_args, encode
from extender.service import Scheduler


class SlowPredictions:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    async def get(self, pod_uid: str):
        await asyncio.sleep(0.001)
        if self.fail:
            raise ConnectionError("predictions store unreachable")
        return None

    async def close(self) -> None:
        return None


def scheduler(source) -> Scheduler:
    return Scheduler(inventory=inventory(gpu_node("gpu-a", 4), gpu_node("gpu-b", 2)),
                     ledger=MemoryLedger(), matrix=default_matrix(),
                     policy=make_policy("sparse"), demand_source=source)


def args(model: bool = True, **kw):
    p = pod(**kw)
    if model:  # the predictor writes demands only for pods describing their model
        p["metadata"]["annotations"]["sparse.io/model"] = '{"family": "dlrm"}'
    return decode_extender_args(encode({"Pod": p, "NodeNames": ["gpu-a", "gpu-b"]}))


async def test_same_answer_as_without_predictions() -> None:
    for kw in ({"mem": 4096, "milli": 200}, {"gpus": 3}, {"mem": 10**9, "milli": 5}):
        a = await scheduler(SlowPredictions()).filter(args(**kw))
        b = await scheduler(NoPredictions()).filter(args(**kw))
        assert encode(a) == encode(b)


async def test_invalid_demand_and_failing_source() -> None:
    bad = await scheduler(SlowPredictions()).filter(args(mem=-5, milli=200))
    assert not bad.NodeNames and "invalid GPU request" in str(bad.FailedAndUnresolvableNodes)
    with pytest.raises(ConnectionError):
        await scheduler(SlowPredictions(fail=True)).filter(args(mem=4096, milli=200))


async def test_no_read_for_a_pod_that_describes_no_model() -> None:
    """The predictor never writes a demand for such a pod: the source is not asked at all."""
    answer = await scheduler(SlowPredictions(fail=True)).filter(args(model=False, mem=4096,
                                                                      milli=200))
    assert answer.NodeNames == ["gpu-a", "gpu-b"]
