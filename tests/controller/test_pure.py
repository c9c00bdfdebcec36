"""Prediction input, worker pods and the admission queue: pure functions."""

from __future__ import annotations

import json

import pytest

from controller.pods import pod_name, worker_pod
from controller.prediction import Demand, InvalidModel, model_annotation, predict
from controller.queue import Waiting, may_try
from predictor import features

JOB = {"metadata": {"name": "dlrm", "namespace": "ml", "uid": "u1"},
       "spec": {"replicas": 2, "batchSize": 1024, "vocabularySize": [10**6, 10**6, 5000],
                "embeddingDim": [64, 64, 16], "optimizer": "adam", "gpuModel": "V100M32|A100",
                "template": {"metadata": {"labels": {"team": "ads"}},
                             "spec": {"containers": [{"name": "trainer", "image": "x"}]}}}}
DEMAND = Demand(12000, 700, "recommendation", "v3")


def test_camel_case_job_fields_when_the_predictor_reads_them():
    if not hasattr(features, "JobFields"):
        pytest.skip("this predictor reads the full schema only")
    ann = json.loads(model_annotation(JOB["spec"])["sparse.io/model"])
    assert ann["vocabularySize"] == JOB["spec"]["vocabularySize"]
    assert ann["batchSize"] == 1024 and ann["gpuModel"] == "V100M32"
    spec = features.from_annotations(model_annotation(JOB["spec"]))
    assert sum(t.count for t in spec.tables) == 3


def test_model_annotation_groups_tables_and_is_a_valid_spec(monkeypatch):
    monkeypatch.delattr(features, "JobFields", raising=False)
    ann = model_annotation(JOB["spec"])
    model = json.loads(ann["sparse.io/model"])
    assert model["tables"] == [{"rows": 10**6, "dim": 64, "count": 2},
                               {"rows": 5000, "dim": 16, "count": 1}]
    assert model["gpu_model"] == "V100M32" and model["batch_size"] == 1024
    spec = features.from_annotations(ann)
    assert sum(t.count for t in spec.tables) == 3


def test_totals_only_job_gets_equal_tables(monkeypatch):
    monkeypatch.delattr(features, "JobFields", raising=False)
    model = json.loads(model_annotation({"batchSize": 64, "embeddingSizeTotal": 26000,
                                         "embeddingDimTotal": 26 * 8,
                                         "embeddingTableCount": 26})["sparse.io/model"])
    assert model["tables"] == [{"rows": 1000, "dim": 8, "count": 26}]


def test_more_tables_raise_the_memory_prediction():
    small = predict({"batchSize": 1024, "vocabularySize": [10**5], "embeddingDim": [64]})
    big = predict({"batchSize": 1024, "vocabularySize": [10**7], "embeddingDim": [64]})
    assert big.gpu_mem_mib > small.gpu_mem_mib + 1000


def test_invalid_model_names_the_field():
    with pytest.raises(InvalidModel, match="batchSize|batch_size"):
        predict({"batchSize": 0})
    with pytest.raises(InvalidModel, match="same|differ|entries"):
        predict({"batchSize": 1, "vocabularySize": [1, 2, 3], "embeddingDim": [4, 4]})


def test_worker_pod_carries_what_the_extender_reads():
    pod = worker_pod(JOB, DEMAND, attempt=0, index=1, slot="gang/u1/0/1")
    meta = pod["metadata"]
    assert meta["name"] == "dlrm-worker-1" and meta["labels"]["team"] == "ads"
    assert meta["annotations"]["sparse.io/gang-slot"] == "gang/u1/0/1"
    assert meta["annotations"]["sparse.io/gpu-model"] == "V100M32|A100"
    assert meta["annotations"]["sparse.io/job-class"] == "recommendation"
    assert meta["ownerReferences"][0]["uid"] == "u1"
    assert "sparse.io/embedding" not in meta["annotations"]
    job = json.loads(json.dumps(JOB))
    job["spec"]["embedding"] = {"store": "criteo", "tables": ["C1"], "hotRows": 10,
                                "required": False, "maxWaitSeconds": 0, "steps": None}
    embedding = worker_pod(job, DEMAND, attempt=0, index=0, slot="s")["metadata"][
        "annotations"]["sparse.io/embedding"]
    # unset fields left out; a wait of 0 kept (it says never wait), and read back as such
    assert json.loads(embedding) == {"store": "criteo", "tables": ["C1"], "hotRows": 10,
                                     "maxWaitSeconds": 0}
    from extender.placement.embedding_annotations import parse_embedding

    assert parse_embedding({"sparse.io/embedding": embedding}).max_wait_s == 0.0
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"sparse.io/gpu-mem": "12000", "sparse.io/gpu-milli": "700"}
    assert {"name": "RANK", "value": "1"} in c["env"]
    assert pod["spec"]["schedulerName"] == "sparse-scheduler"
    assert JOB["spec"]["template"]["spec"]["containers"][0].get("resources") is None  # copied
    assert pod_name("dlrm", 2, 0) == "dlrm-r2-worker-0"


def test_declared_share_combines_like_the_extender():
    job = json.loads(json.dumps(JOB))
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"sparse.io/gpu-mem": "20000", "sparse.io/gpu-milli": "300"}}
    limits = worker_pod(job, DEMAND, attempt=0, index=0, slot="s")["spec"]["containers"][0][
        "resources"]["limits"]
    assert limits == {"sparse.io/gpu-mem": "20000", "sparse.io/gpu-milli": "300"}


def test_whole_gpu_template_is_kept():
    job = json.loads(json.dumps(JOB))
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "2"}}
    limits = worker_pod(job, DEMAND, attempt=0, index=0, slot="s")["spec"]["containers"][0][
        "resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "2"}


def test_queue_fifo_with_bounded_pass_over():
    head = Waiting("ml/big", created=0, waiting_since=100)
    young = Waiting("ml/small", created=5, waiting_since=None)
    assert may_try("ml/small", [head, young], now=200, max_pass_over_s=300) == (True, "")
    ok, why = may_try("ml/small", [head, young], now=400, max_pass_over_s=300)
    assert not ok and "ml/big" in why
    assert may_try("ml/big", [head, young], now=400, max_pass_over_s=300)[0]
    never = Waiting("ml/big", created=0, waiting_since=100, ever_fits=False)
    assert may_try("ml/small", [never, young], now=10_000, max_pass_over_s=300)[0]


def test_the_example_job_predicts_a_fitting_share(repo_root):
    import yaml

    spec = yaml.safe_load((repo_root / "examples" / "dlrm-job.yaml").read_text())["spec"]
    d = predict(spec)
    # the example allows V100M32|A100: a worker must fit on one of them
    assert 8 * 1024 < d.gpu_mem_mib < 40 * 1024 and 1 <= d.gpu_milli <= 1000
    assert d.job_class == "recommendation"


def test_failed_job_handlers_retry_within_seconds_not_kopfs_default_minute():
    """A deletion whose pod delete failed once must not hold the finalizer for a minute."""
    from controller.operator import Holder, Options, make_registry

    handlers = make_registry(Options("http://extender"), Holder())._changing.get_all_handlers()
    assert {h.reason for h in handlers} >= {"create", "delete"}
    assert all(h.backoff is not None and h.backoff <= 5 for h in handlers)


def test_worker_pod_gets_the_queue_band_class_unless_the_template_names_one():
    pod = worker_pod(JOB, DEMAND, attempt=0, index=1, slot="s", priority_class="sparse-duration-3")
    assert pod["spec"]["priorityClassName"] == "sparse-duration-3"
    assert "priorityClassName" not in worker_pod(JOB, DEMAND, attempt=0, index=1, slot="s")["spec"]
    job = json.loads(json.dumps(JOB))
    job["spec"]["template"]["spec"]["priorityClassName"] = "team-critical"
    pod = worker_pod(job, DEMAND, attempt=0, index=0, slot="s", priority_class="sparse-duration-0")
    assert pod["spec"]["priorityClassName"] == "team-critical"


def test_queue_takes_higher_bands_first_then_fifo():
    long_young = Waiting("ml/long", created=50, waiting_since=None, priority=1003)
    short_old = Waiting("ml/short", created=0, waiting_since=100, priority=1000)
    # the long job is ahead: once it has waited past the bound, the short one may not pass it
    waited = Waiting("ml/long", created=50, waiting_since=60, priority=1003)
    ok, why = may_try("ml/short", [waited, short_old], now=400, max_pass_over_s=300)
    assert not ok and "ml/long" in why
    assert may_try("ml/long", [long_young, short_old], now=10_000, max_pass_over_s=300)[0]
    same_band = Waiting("ml/long2", created=10, waiting_since=None, priority=1003)
    assert may_try("ml/long2", [long_young, same_band, short_old], now=0,
                   max_pass_over_s=300)[0]


def test_cli_refuses_bad_queue_band_options():
    from click.testing import CliRunner

    from controller.cli import duration_bands, main

    res = CliRunner().invoke(main, ["--extender-url", "http://x", "--queue-order",
                                    "longest-first", "--queue-band-range", "600:60"])
    assert res.exit_code == 2 and "--queue-band-range" in res.output and "exceed" in res.output
    assert duration_bands("off", 4, "60:14400", 1000, "p") is None
    bands = duration_bands("shortest-first", 3, "60:6000", 10, "rel-duration")
    assert bands.class_name(0) == "rel-duration-0" and bands.priority(0) == 12
    critical = duration_bands("critical-first", 4, "60:14400", 1000, "sparse-duration")
    assert [critical.priority(i) for i in range(4)] == [1001, 1000, 1002, 1003]
    one = duration_bands("critical-first", 4, "60:14400", 1000, "sparse-duration", 1)
    assert [one.priority(i) for i in range(4)] == [1002, 1001, 1000, 1003]
    res = CliRunner().invoke(main, ["--extender-url", "http://x", "--queue-order",
                                    "critical-first", "--queue-bands", "2",
                                    "--queue-critical-bands", "3"])
    assert res.exit_code == 2 and "critical bands" in res.output
    res = CliRunner().invoke(main, ["--extender-url", "http://x", "--queue-order",
                                    "critical-first", "--queue-band-range", "600:60"])
    assert res.exit_code == 2 and "exceed" in res.output  # the mode parses; the range does not
    res = CliRunner().invoke(main, ["--extender-url", "http://x", "--queue-order", "middle"])
    assert res.exit_code == 2 and "critical-first" in res.output


def test_worker_pod_carries_the_predicted_run_time_when_known():
    from extender.annotations import ANN_PREDICTED_SECONDS

    pod = worker_pod(JOB, DEMAND, attempt=0, index=0, slot="s", predicted_s=5400.4)
    assert pod["metadata"]["annotations"][ANN_PREDICTED_SECONDS] == "5400"
    pod = worker_pod(JOB, DEMAND, attempt=0, index=0, slot="s")
    assert ANN_PREDICTED_SECONDS not in pod["metadata"]["annotations"]


def test_latest_start_puts_due_jobs_ahead_of_every_band_least_slack_first():
    from controller.queue import Load, due_slack

    # 1 GPU; a short job runs with 100 s left; two long jobs wait, one short waits
    loads = [Load("ml/run", created=0, predicted_s=200, started=100.0),
             Load("ml/bert", created=0, predicted_s=900, margin=1.0),
             Load("ml/yolo", created=0, predicted_s=600, margin=3.0),
             Load("ml/short", created=0, predicted_s=50, margin=3.0),
             Load("ml/done", created=0, predicted_s=10**6, finished=True),
             Load("ml/unknown", created=0, predicted_s=None)]
    # drain: 100 + 900 + 600 + 50 = 1,650 s on 1 GPU; only YOLO (1,800 s at x3) outlasts it
    assert set(due_slack(loads, 200.0, 1.0)) == {"ml/yolo"}
    due = due_slack(loads, 200.0, 4.0)  # 412 s on 4 GPUs: BERT too, after YOLO (less slack)
    assert set(due) == {"ml/yolo", "ml/bert"} and due["ml/yolo"] < due["ml/bert"]
    assert due_slack(loads, 200.0, 0.0) == {} and due_slack([], 0.0, 4.0) == {}
    waiting = [Waiting("ml/short", created=0, waiting_since=100, priority=1003),
               Waiting("ml/bert", created=0, waiting_since=None, priority=1000),
               Waiting("ml/yolo", created=5, waiting_since=None, priority=1000)]
    # the short job has waited past the bound: only a due job may go ahead of it
    assert may_try("ml/yolo", waiting, now=400, max_pass_over_s=300, due=due)[0]
    ok, why = may_try("ml/bert", waiting, now=400, max_pass_over_s=300, due={"ml/yolo": -1.0})
    assert not ok and "ml/short" in why
    # while work arrives as fast as the GPUs serve it, nothing is due
    flow = [Load(f"ml/j{i}", created=float(i), predicted_s=4.0) for i in range(1, 101)]
    assert due_slack([*flow, Load("ml/long", created=0, predicted_s=10**4, margin=3.0)],
                     100.0, 4.0) == {}
    # ... but a job whose latest start came before stays ahead until it starts
    kept = due_slack([*flow, Load("ml/long", created=0, predicted_s=10**4, margin=3.0,
                                  due=True)], 100.0, 4.0)
    assert kept == {"ml/long": -3e4}
    assert due_slack([Load("ml/long", created=0, predicted_s=10**4, due=True, started=5.0)],
                     100.0, 4.0) == {}


def test_long_gangs_wait_in_their_band_once_they_hold_their_share_of_the_gpus():
    from controller.queue import Load, gang_share

    # 4 GPUs; a long gang of 2 runs, another waits; two one-GPU jobs wait
    loads = [Load("ml/gang-a", created=0, predicted_s=1_000, gpus=2, started=0.0, gang=True),
             Load("ml/gang-b", created=0, predicted_s=1_000, gpus=2, gang=True),
             Load("ml/short1", created=0, predicted_s=100),
             Load("ml/short2", created=0, predicted_s=100)]
    # the gangs are 3,800 / 4,000 GPU-s left: 2 GPUs < 0.95 x 4, they go first
    assert gang_share(loads, 100.0, 4.0)
    # on 2 GPUs the running gang holds 2 >= 0.95 x 2: they wait in their band
    assert not gang_share(loads, 100.0, 2.0)
    # no long gang, nothing at all: the rule does not apply
    assert not gang_share([Load("ml/x", created=0, predicted_s=10)], 0.0, 4.0)
    assert not gang_share([], 0.0, 4.0)
    waiting = [Waiting("ml/gang-b", created=0, waiting_since=None, priority=1004,
                       band_priority=1000),
               Waiting("ml/short1", created=5, waiting_since=0, priority=1003)]
    # gangs first: the gang is at the head of the queue
    assert may_try("ml/gang-b", waiting, now=400, max_pass_over_s=300)[0]
    # in their band, the gang is behind the short job, which has waited past the bound
    ok, why = may_try("ml/gang-b", waiting, now=400, max_pass_over_s=300, gangs_first=False)
    assert not ok and "ml/short1" in why
    assert "long gangs hold their share" in why and "priority 1000" in why
    # the short job is told nothing about the gangs' share
    short_why = may_try("ml/short1", [*waiting[::-1], Waiting("ml/short0", created=1,
                                                             waiting_since=0, priority=1003)],
                        now=400, max_pass_over_s=300, gangs_first=False)[1]
    assert "ml/short0" in short_why and "share" not in short_why
    assert may_try("ml/short1", waiting, now=400, max_pass_over_s=300, gangs_first=False)[0]


def test_node_gpu_count_reads_allocatable_gpus():
    from controller.operator import node_gpu_count

    assert node_gpu_count({"allocatable": {"nvidia.com/gpu": "8"}}) == 8.0
    assert node_gpu_count({"allocatable": {"cpu": "4"}}) == 0.0
    assert node_gpu_count({"allocatable": {"nvidia.com/gpu": "x"}}) == 0.0 == node_gpu_count({})


def test_the_operator_asks_the_gang_share_only_with_the_latest_start_indexes():
    from controller.operator import Holder
    from controller.queue import Load

    holder = Holder()
    assert holder.gangs_first(0.0)  # other orders: the long gangs always go first
    holder.loads = {"ml/gang": [Load("ml/gang", created=0, predicted_s=1_000, gpus=2,
                                     started=0.0, gang=True)],
                    "ml/next": [Load("ml/next", created=0, predicted_s=1_000, gpus=2,
                                     gang=True)],
                    "ml/one": [Load("ml/one", created=0, predicted_s=1_000)]}
    holder.gpus = {"n1": [4.0]}
    assert holder.gangs_first(0.0)  # 2 GPUs < 4,000 / 5,000 x 4
    holder.gpus = {"n1": [2.0]}
    assert not holder.gangs_first(0.0)  # 2 GPUs >= 0.8 x 2


def test_several_replicas_book_ddp_unless_the_job_says_how_they_sync():
    # DistributedDataParallel keeps buckets as large as the dense gradients in each worker
    def ann(spec):
        return json.loads(model_annotation(spec)["sparse.io/model"])

    one = {**JOB["spec"], "replicas": 1}
    no = {**JOB["spec"], "dataParallel": "none"}
    view = {**JOB["spec"], "dataParallel": "ddp-bucket-view"}
    assert ann(JOB["spec"])["dataParallelWorkers"] == 2
    assert "gradientAsBucketView" not in ann(JOB["spec"])
    assert ann(view)["dataParallelWorkers"] == 2 and ann(view)["gradientAsBucketView"]
    for spec in (one, no):
        assert "dataParallelWorkers" not in ann(spec)
    assert ann({**one, "dataParallel": "ddp"})["dataParallelWorkers"] == 1
    tables_mib = (2 * 10**6 * 64 + 5000 * 16) * 4 / 2**20  # dense gradients of the tables
    assert predict(JOB["spec"]).gpu_mem_mib >= predict(one).gpu_mem_mib + tables_mib
    assert predict(no).gpu_mem_mib == predict(one).gpu_mem_mib
    with pytest.raises(InvalidModel, match="dataParallel"):
        predict({**JOB["spec"], "dataParallel": "horovod"})


def test_sharded_tables_are_booked_per_worker_shard():
    # TorchRec shards the tables over the DDP workers: each worker holds its part only
    def ann(spec):
        return json.loads(model_annotation(spec)["sparse.io/model"])

    spec = {**JOB["spec"], "replicas": 4}
    rows = {**spec, "embeddingSharding": "row-wise"}
    assert ann(rows)["embeddingSharding"] == "row-wise"
    assert ann(rows)["dataParallelWorkers"] == 4
    assert ann({**rows, "unpooledLookups": True})["unpooledLookups"] is True
    tables_mib = (2 * 10**6 * 64 + 5000 * 16) * 4 / 2**20
    assert predict(rows).gpu_mem_mib < predict(spec).gpu_mem_mib - tables_mib
    # one replica still shards (over one worker), under DDP unless the job says none
    one = {**rows, "replicas": 1}
    assert ann(one)["dataParallelWorkers"] == 1
    with pytest.raises(InvalidModel, match="embeddingSharding.*dataParallel"):
        predict({**rows, "dataParallel": "none"})
    with pytest.raises(InvalidModel, match="embeddingSharding"):
        predict({**rows, "embeddingSharding": "diagonal"})


def test_the_full_schema_carries_the_sync_too(monkeypatch):
    monkeypatch.delattr(features, "JobFields", raising=False)
    model = json.loads(model_annotation(JOB["spec"])["sparse.io/model"])
    assert model["data_parallel_workers"] == 2 and model["gradient_as_bucket_view"] is False
    assert features.from_annotations(model_annotation(JOB["spec"])).data_parallel_workers == 2
    sharded = {**JOB["spec"], "embeddingSharding": "table-wise"}
    assert features.from_annotations(model_annotation(sharded)).embedding_sharding == \
        "table-wise"
