from __future__ import annotations

import pytest
from builders import container, pod

from extender.demand import Prediction, pod_demand
from extender.errors import InvalidDemand
from extender.protocol import pod_from_dict
from extender.quantity import parse_int_quantity


@pytest.mark.parametrize(("value", "expected"), [
    ("8192", 8192), (4, 4), ("1k", 1000), ("2Ki", 2048), ("0", 0), ("1e3", 1000),
])
def test_quantities(value, expected):
    assert parse_int_quantity(value, "r") == expected


@pytest.mark.parametrize("value", ["-1", "1.5", "abc", "8 Gi", True, None, [], "1" * 80, "1E30"])
def test_bad_quantities(value):
    with pytest.raises(InvalidDemand):
        parse_int_quantity(value, "r")


def demand(p, prediction=None):
    return pod_demand(pod_from_dict(p), prediction)


def test_share_and_whole():
    d = demand(pod(mem=8192, milli=300, job_class="Recommendation"))
    assert (d.whole_gpus, d.share_mem_mib, d.share_milli, d.job_class) == (0, 8192, 300,
                                                                          "recommendation")
    d = demand(pod(gpus=2, models="V100M16|V100M32"))
    assert d.whole_gpus == 2 and not d.has_share
    assert d.allowed_models == frozenset({"V100M16", "V100M32"})


def test_requests_win_over_limits():
    p = pod(containers=[{"name": "c", "resources": {"limits": {"sparse.io/gpu-mem": "9000"},
                                                     "requests": {"sparse.io/gpu-mem": "4000"}}}])
    assert demand(p).share_mem_mib == 4000


def test_multi_container_shares_are_summed_and_kept_per_container():
    p = pod(containers=[container("a", mem=1000, milli=100),
                        container("b", mem=3000, milli=200),
                        container("w", gpus=1),
                        container("cpu-only")])
    d = demand(p)
    assert (d.whole_gpus, d.share_mem_mib, d.share_milli) == (1, 4000, 300)
    assert [(c.name, c.mem_mib, c.milli) for c in d.share_containers] == [
        ("a", 1000, 100), ("b", 3000, 200)]


@pytest.mark.parametrize("p", [
    pod(milli=1500, mem=10),
    pod(milli=0, mem=10),
    pod(containers=[container("a", gpus=1, mem=10)]),
    pod(milli=300),  # a share without memory and without a prediction
    pod(containers=[container("a", mem=10, milli=600),
                    container("b", mem=10, milli=600)]),
    pod(gpus=1000),
])
def test_invalid_demands(p):
    with pytest.raises(InvalidDemand):
        demand(p)


def test_prediction_never_lowers_memory_but_may_lower_compute():
    pred = Prediction(gpu_milli=200, gpu_mem_mib=6000, job_class="cnn")
    d = demand(pod(mem=8000, milli=500), pred)
    assert (d.share_mem_mib, d.share_milli, d.job_class) == (8000, 200, "cnn")
    d = demand(pod(mem=4000, milli=100), pred)
    assert (d.share_mem_mib, d.share_milli) == (6000, 100)
    d = demand(pod(milli=300), pred)  # memory only from the prediction
    assert (d.share_mem_mib, d.share_milli) == (6000, 200)
    d = demand(pod(mem=4000, milli=100, job_class="rnn"), pred)
    assert d.job_class == "rnn"  # the annotation wins


def test_prediction_excess_spread_over_containers():
    p = pod(containers=[container("a", mem=1000, milli=100),
                        container("b", mem=3000, milli=100)])
    d = demand(p, Prediction(gpu_milli=1000, gpu_mem_mib=8000))
    assert sum(c.mem_mib for c in d.share_containers) == 8000
    assert [c.mem_mib for c in d.share_containers] == [2000, 6000]


@pytest.mark.parametrize("fields", [
    {}, {"gpu_milli": "x", "gpu_mem_mib": "1"}, {"gpu_milli": "0", "gpu_mem_mib": "100"},
    {"gpu_milli": "100", "gpu_mem_mib": "-5"}, {"gpu_milli": "2000", "gpu_mem_mib": "5"},
])
def test_bad_predictions_are_ignored(fields):
    assert Prediction.from_hash(fields) is None


def test_prediction_hash():
    p = Prediction.from_hash({"gpu_milli": "250", "gpu_mem_mib": "4096.0", "job_class": "cnn",
                              "model_version": "v1", "updated_at": "17"})
    assert p == Prediction(250, 4096, "cnn", "v1", 17.0)


def test_the_predicted_run_time_comes_from_the_controllers_annotation():
    from extender.annotations import ANN_PREDICTED_SECONDS

    p = pod(gpus=8)
    assert demand(p).predicted_s is None
    p["metadata"]["annotations"][ANN_PREDICTED_SECONDS] = "5400"
    assert demand(p).predicted_s == 5400.0
    for bad in ("soon", "-3", "nan", "0"):
        p["metadata"]["annotations"][ANN_PREDICTED_SECONDS] = bad
        with pytest.raises(InvalidDemand, match="predicted-seconds"):
            demand(p)
