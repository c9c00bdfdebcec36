"""The variant generator: lists made from default as the upstream variants are."""

import pytest

from bench.sim import variants as va
from bench.sim.trace import load_pods, workload_path


@pytest.fixture(scope="module")
def base():
    return load_pods(workload_path("default"))


@pytest.mark.parametrize("name", ["gpushare40", "gpushare60", "gpushare100",
                                  "multigpu20", "multigpu30", "multigpu50"])
def test_matches_the_shipped_list(base, name):
    shipped = va.summary(load_pods(workload_path(name)))
    made = va.summary(va.generate(name, base=base))
    assert made["share_of_request"] == pytest.approx(shipped["share_of_request"], abs=0.01)
    assert made["multi_of_request"] == pytest.approx(shipped["multi_of_request"], abs=0.015)
    assert made["cpu_only"] == shipped["cpu_only"]
    assert made["gpu_request"] == pytest.approx(shipped["gpu_request"], rel=0.02)


def test_held_out_levels(base):
    assert va.summary(va.generate("gpushare80", base=base))["share_of_request"] == \
        pytest.approx(0.8, abs=0.01)
    assert va.summary(va.generate("multigpu40", base=base))["multi_of_request"] == \
        pytest.approx(0.4, abs=0.01)
    spec = va.summary(va.generate("gpuspec25", base=base))
    assert spec["with_model_list"] == round(0.25 * (spec["pods"] - spec["cpu_only"]))
    cpu = va.summary(va.generate("cpu200", base=base))
    assert 789 < cpu["cpu_only"] < 2176  # between the shipped cpu100 and cpu235
    assert cpu["shares"] == 3078 and cpu["gpu_request"] == pytest.approx(6086.8)


def test_deterministic_and_seeded(base):
    one, two = va.generate("gpushare80", seed=3, base=base), va.generate("gpushare80", seed=3,
                                                                          base=base)
    assert one.equals(two)
    assert not one.equals(va.generate("gpushare80", seed=4, base=base))


def test_bad_names():
    for name in ("gpushare", "share80", "gpushare120", "multigpu100"):
        with pytest.raises(ValueError):
            va.parse(name)
