"""The reconciler against a fake API server and the real extender service in-process."""

from __future__ import annotations

import contextlib

import pytest

from extender.ledger.rules import Allocation, GpuCapacity, Reservation


def cond(status, kind):
    return next(c for c in status["conditions"] if c["type"] == kind)


async def occupy_one_gpu(world, gpu="GPU-b-1"):
    mib = world.gpu_mib
    r = Reservation(pod_uid="other", namespace="ml", name="other", node="b",
                    allocations=(Allocation(gpu, "c", mib, 1000),))
    await world.scheduler.ledger.reserve(r, {gpu: GpuCapacity(mib)})


async def test_predicted_admitted_bound_running_succeeded(world):
    world.submit("dlrm")
    s = await world.reconcile("dlrm")
    assert cond(s, "Predicted")["status"] == "True"
    assert "DistributedDataParallel" in cond(s, "Predicted")["message"]  # 4 replicas
    assert s["demand"]["gpuMemMiB"] > 1000 and 1 <= s["demand"]["gpuMilli"] <= 1000
    assert s["phase"] == "Admitted" and cond(s, "Admitted")["reason"] == "GangReserved"
    assert len(world.kube.pods) == 4
    slots = {p["metadata"]["annotations"]["sparse.io/gang-slot"]
             for p in world.kube.pods.values()}
    assert slots == set(await world.ledger())  # the slots, and nothing else, are booked
    pod = world.kube.pods["dlrm-worker-0"]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "RecommendDLJob"
    assert pod["spec"]["schedulerName"] == "sparse-scheduler"
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert int(limits["sparse.io/gpu-mem"]) == s["demand"]["gpuMemMiB"]

    await world.schedule()
    held = await world.ledger()
    assert not any(uid.startswith("gang/") for uid in held)  # every slot consumed by a bind
    assert len(held) == 4
    s = await world.reconcile("dlrm")
    assert s["phase"] == "Scheduled" and s["gpuCount"] == 4
    assert all(x["node"] and len(x["gpus"]) == 1 for x in s["placement"])
    assert {x["gpus"][0] for x in s["placement"]} == {g for r in held.values() for g in r.gpus}

    world.set_phase("Running")
    s = await world.reconcile("dlrm")
    assert (s["phase"], s["ready"]) == ("Running", "4/4")
    world.set_phase("Succeeded")
    s = await world.reconcile("dlrm")
    assert s["phase"] == "Succeeded" and cond(s, "Succeeded")["status"] == "True"
    reasons = [r for _, r, _ in world.kube.events]
    assert reasons == ["Predicted", "Admitted", "Scheduled", "Running", "Succeeded"]


async def test_does_not_fit_holds_nothing_then_runs(world):
    await occupy_one_gpu(world)
    world.submit("dlrm")
    s = await world.reconcile("dlrm")
    assert s["phase"] == "Pending" and not world.kube.pods
    admitted = cond(s, "Admitted")
    assert admitted["status"] == "False" and admitted["reason"] == "InsufficientGPU"
    assert "3 of 4 workers fit" in admitted["message"]
    assert set(await world.ledger()) == {"other"}
    world.now += 10
    s = await world.reconcile("dlrm")  # retried: still waiting, still nothing held
    assert s["phase"] == "Pending" and set(await world.ledger()) == {"other"}
    await world.scheduler.release("other")
    s = await world.reconcile("dlrm")
    assert s["phase"] == "Admitted" and len(world.kube.pods) == 4
    assert "waitingSince" not in s


async def test_never_fitting_job_is_unschedulable(world):
    world.submit("huge", replicas=5)
    s = await world.reconcile("huge")
    assert cond(s, "Admitted")["reason"] == "Unschedulable"
    assert s["everFits"] is False and await world.ledger() == {}


async def test_backfill_is_bounded(world):
    await occupy_one_gpu(world)
    world.submit("big", created="2026-12-01T00:00:00Z")
    world.submit("small", replicas=1, created="2026-12-01T00:00:01Z")
    assert (await world.reconcile("big"))["phase"] == "Pending"
    assert (await world.reconcile("small"))["phase"] == "Admitted"  # backfills
    world.now += 301
    world.submit("late", replicas=1, created="2026-12-01T00:00:02Z")
    s = await world.reconcile("late")
    assert s["phase"] == "Pending" and cond(s, "Admitted")["reason"] == "Queued"
    assert "queued behind ml/big" in cond(s, "Admitted")["message"]


async def test_failed_worker_restarts_then_fails(world):
    world.submit("dlrm")
    await world.reconcile("dlrm")
    await world.schedule()
    world.set_phase("Running")
    await world.reconcile("dlrm")
    world.set_phase("Failed", "dlrm-worker-2")
    s = await world.reconcile("dlrm")
    assert (s["phase"], s["attempt"], s["restarts"]) == ("Pending", 1, 1)
    assert not world.kube.pods
    for name in list(world.kube.pods):
        world.kube.pods.pop(name)
    for uid in list(await world.ledger()):  # the extender releases deleted pods' GPUs
        await world.scheduler.release(uid)
    s = await world.reconcile("dlrm")
    assert s["phase"] == "Admitted"
    assert sorted(world.kube.pods) == [f"dlrm-r1-worker-{i}" for i in range(4)]
    await world.schedule()
    world.set_phase("Failed", "dlrm-r1-worker-0")
    s = await world.reconcile("dlrm")
    assert s["phase"] == "Failed" and cond(s, "Failed")["reason"] == "BackoffLimitExceeded"
    assert not any(u.startswith("gang/") for u in await world.ledger())


async def test_killed_mid_admission_leaves_no_partial_reservation(world):
    world.submit("dlrm")
    world.kube.fail_creates = 1  # slots booked and recorded, then the controller dies
    with contextlib.suppress(RuntimeError):
        await world.reconcile("dlrm")
    status = world.kube.jobs["dlrm"]["status"]
    assert status["phase"] == "Admitted" and not world.kube.pods
    slots_before = set(await world.ledger())
    s = await world.reconcile("dlrm")  # the restarted controller finishes the admission
    assert len(world.kube.pods) == 4 and set(await world.ledger()) == slots_before
    assert s["phase"] == "Admitted"


async def test_abandoned_admission_expires(world):
    world.submit("dlrm")
    world.kube.fail_creates = 1
    with contextlib.suppress(RuntimeError):
        await world.reconcile("dlrm")
    world.now += 61
    assert len(await world.scheduler.expire()) == 4
    assert await world.ledger() == {}


async def test_gang_timeout_readmits(world):
    world.submit("dlrm")
    await world.reconcile("dlrm")
    world.now += 61  # no scheduler ever bound the pods
    s = await world.reconcile("dlrm")
    assert (s["phase"], s["attempt"], s["restarts"]) == ("Pending", 1, 0)
    assert cond(s, "Admitted")["reason"] == "GangTimeout"
    assert await world.ledger() == {}


async def test_delete_releases_everything(world):
    world.submit("dlrm")
    await world.reconcile("dlrm")
    world.kube.pods.pop("dlrm-worker-3")  # one pod not created yet
    await world.r.cleanup(world.kube.jobs["dlrm"])
    assert not world.kube.pods
    assert await world.ledger() == {}  # its slot too


async def test_invalid_model_fails(world):
    world.submit("bad", batchSize=0)
    s = await world.reconcile("bad")
    assert s["phase"] == "Failed" and cond(s, "Predicted")["reason"] == "InvalidModel"
    assert "batchSize" in cond(s, "Predicted")["message"]
    assert await world.ledger() == {}


async def test_ttl_after_finished_deletes_the_job(world):
    world.submit("dlrm", replicas=1, runPolicy={"ttlSecondsAfterFinished": 30})
    await world.reconcile("dlrm")
    await world.schedule()
    world.set_phase("Succeeded")
    await world.reconcile("dlrm")
    world.now += 31
    await world.reconcile("dlrm")
    assert "dlrm" not in world.kube.jobs


async def test_deadline(world):
    world.submit("dlrm", replicas=1, runPolicy={"activeDeadlineSeconds": 100})
    await world.reconcile("dlrm")
    world.now += 101
    s = await world.reconcile("dlrm")
    assert s["phase"] == "Failed" and cond(s, "Failed")["reason"] == "DeadlineExceeded"
    assert not world.kube.pods and await world.ledger() == {}


async def test_refused_pods_are_reported_and_retried(world):
    world.submit("dlrm")
    world.kube.refuse_creates = True
    s = await world.reconcile("dlrm")
    assert s["phase"] == "Admitted" and "admission webhook denied" in s["message"]
    await world.reconcile("dlrm")
    assert [r for _, r, _ in world.kube.events].count("FailedCreate") == 1
    world.kube.refuse_creates = False
    await world.reconcile("dlrm")
    assert len(world.kube.pods) == 4
    assert len(await world.ledger()) == 4  # the same slots, nothing booked twice


async def test_unreachable_extender_does_not_block_delete_or_restart(world):
    from controller.errors import GangError

    world.submit("dlrm")
    await world.reconcile("dlrm")
    await world.schedule()
    real = world.r.gangs

    class Down:
        async def reserve(self, request):
            raise GangError("extender unreachable")

        async def release(self, job_uid, attempt=None):
            raise GangError("extender unreachable")

    world.r.gangs = Down()
    world.set_phase("Failed", "dlrm-worker-1")
    s = await world.reconcile("dlrm")
    assert (s["phase"], s["attempt"], s["restarts"]) == ("Pending", 1, 1)
    s = await world.reconcile("dlrm")
    assert cond(s, "Admitted")["reason"] == "ExtenderUnavailable"
    await world.r.cleanup(world.kube.jobs["dlrm"])
    assert not world.kube.pods
    world.r.gangs = real


async def test_slots_booked_anew_after_expiry_restart_the_bind_clock(world):
    world.submit("dlrm")
    world.kube.refuse_creates = True
    await world.reconcile("dlrm")
    world.now += 61
    assert len(await world.scheduler.expire()) == 4
    world.kube.refuse_creates = False
    s = await world.reconcile("dlrm")  # same slot names, new deadline: a new admission
    assert s["phase"] == "Admitted" and len(world.kube.pods) == 4
    s = await world.reconcile("dlrm")
    assert (s["phase"], s["attempt"]) == ("Admitted", 0)  # no GangTimeout from the old clock
    await world.schedule()
    assert (await world.reconcile("dlrm"))["phase"] == "Scheduled"


def _banded(world):
    from controller.reconcile import Config
    from extender.queueorder import DurationBands

    bands = DurationBands.log_spaced(60, 14_400, 4)
    world.r.config = Config(slot_ttl_s=60, max_pass_over_s=300, bands=bands)
    return bands


async def test_queue_band_from_declared_steps_goes_on_every_worker(world):
    bands = _banded(world)
    world.submit("long", steps=10**7)  # ~10^7 steps: hours at any predicted step time
    s = await world.reconcile("long")
    band = s["queueBand"]
    assert band == {"name": "sparse-duration-3", "band": 3, "priority": 1003,
                    "predictedSeconds": band["predictedSeconds"]}
    assert band["predictedSeconds"] / (10**7 * s["demand"]["stepSeconds"]) == pytest.approx(
        1.0, rel=1e-3)
    assert bands.band(band["predictedSeconds"]) == 3
    assert {p["spec"]["priorityClassName"] for p in world.kube.pods.values()} == {
        "sparse-duration-3"}  # the gang stays in one band
    queued = [m for _, r, m in world.kube.events if r == "QueueBand"]
    assert len(queued) == 1 and "sparse-duration-3" in queued[0] and "steps" in queued[0]
    from controller.reconcile import waiting_entry
    assert waiting_entry({"metadata": {"name": "x", "namespace": "ml"},
                          "status": {"queueBand": band}}).priority == 1003


async def test_a_long_gang_of_whole_gpus_gets_the_class_ahead_of_every_band(world):
    bands = _banded(world)
    whole = {"template": {"spec": {"containers": [{"name": "trainer", "image": "x",
                                                   "resources": {"limits": {
                                                       "nvidia.com/gpu": 1}}}]}}}
    world.submit("gang", replicas=2, steps=10**7, **whole)
    s = await world.reconcile("gang")
    assert s["queueBand"]["name"] == "sparse-duration-gang"
    assert s["queueBand"]["priority"] == bands.gang_priority() > bands.priority(3)
    assert s["queueBand"]["band"] == 3  # its duration band is kept in the status
    note = next(m for _, r, m in world.kube.events if r == "QueueBand")
    assert "gang of 2 whole GPUs" in note
    world.submit("short-gang", replicas=2, steps=10, **whole)  # short: keeps its band
    assert (await world.reconcile("short-gang"))["queueBand"]["name"] == "sparse-duration-0"
    world.submit("one", replicas=1, steps=10**7, **whole)  # one GPU: never starves
    assert (await world.reconcile("one"))["queueBand"]["name"] == "sparse-duration-3"
    assert "bandPriority" not in s["queueBand"]  # longest-first: the gangs always go first


async def test_latest_start_records_a_long_gangs_own_band_for_its_share(world):
    from controller.reconcile import Config, load_entry, waiting_entry
    from extender.queueorder import DurationBands

    bands = DurationBands.log_spaced(60, 14_400, 4, order="latest-start")
    world.r.config = Config(slot_ttl_s=60, max_pass_over_s=300, bands=bands)
    whole = {"template": {"spec": {"containers": [{"name": "trainer", "image": "x",
                                                   "resources": {"limits": {
                                                       "nvidia.com/gpu": 1}}}]}}}
    world.submit("gang", replicas=2, steps=10**7, **whole)
    s = await world.reconcile("gang")
    band = s["queueBand"]
    assert band["priority"] == bands.gang_priority()
    assert band["bandPriority"] == bands.priority(3)  # latest-start: 3 is taken last
    job = {"metadata": {"name": "gang", "namespace": "ml"}, "status": {"queueBand": band}}
    assert waiting_entry(job).band_priority == bands.priority(3)
    assert load_entry(job).gang
    world.submit("single", replicas=1, steps=10**7, **whole)
    one = await world.reconcile("single")
    assert "bandPriority" not in one["queueBand"]
    assert not load_entry({"metadata": {"name": "single", "namespace": "ml"},
                           "status": one}).gang


async def test_job_without_steps_or_with_bad_steps_gets_the_default_band(world):
    _banded(world)
    world.submit("plain")
    s = await world.reconcile("plain")
    assert s["queueBand"]["name"] == "sparse-duration-2" and "predictedSeconds" not in \
        s["queueBand"]
    world.submit("bad", steps=-4)  # the CRD refuses it; a job stored without it is not lost
    s = await world.reconcile("bad")
    assert s["queueBand"]["band"] == 2
    notes = {m: kind for kind, r, m in world.kube.events if r == "QueueBand"}
    assert any("declares no spec.steps" in m and k == "Normal" for m, k in notes.items())
    assert any("spec.steps must be a whole number" in m and k == "Warning"
               for m, k in notes.items())


async def test_bands_off_sets_no_class(world):
    world.submit("dlrm", steps=1000)
    s = await world.reconcile("dlrm")
    assert "queueBand" not in s and s["phase"] == "Admitted"
    assert all("priorityClassName" not in p["spec"] for p in world.kube.pods.values())


async def test_latest_start_records_the_margins_and_admits_a_due_job_first(world):
    from controller.reconcile import Config, load_entry
    from extender.queueorder import DurationBands
    from predictor import step_bounds

    bands = DurationBands.log_spaced(60, 14_400, 4, order="latest-start")
    world.r.config = Config(slot_ttl_s=60, max_pass_over_s=300, bands=bands)
    await occupy_one_gpu(world)
    world.submit("big", created="2026-12-01T00:00:00Z")
    world.submit("long", replicas=1, steps=10**7, family="dlrm",
                 created="2026-12-01T00:00:01Z")
    s = await world.reconcile("big")
    assert s["phase"] == "Pending" and s["queueBand"]["name"] == "sparse-duration-2"
    world.now += 301  # big has waited past the bound: jobs behind it wait too ...
    band = (await world.reconcile("long"))["queueBand"]
    assert band["priority"] == bands.priority(3) < bands.priority(0)  # shortest first
    assert band["errorBound"] == step_bounds.load().margin("dlrm")
    assert band["medianError"] == step_bounds.load_median().margin("dlrm")
    assert world.kube.jobs["long"]["status"]["phase"] == "Pending"
    load = load_entry(world.kube.jobs["long"])
    assert load.predicted_s == band["predictedSeconds"] and load.started is None
    assert load.margin == band["errorBound"] and load.gpus > 0
    world.r.due = lambda now: {"ml/long": -1.0}  # ... unless its latest start has come
    s = await world.reconcile("long")
    assert s["phase"] == "Admitted" and s["queueBand"]["dueSince"]
    assert any(r == "LatestStart" for _, r, _ in world.kube.events)
    load = load_entry(world.kube.jobs["long"])
    assert load.started is not None and load.due


async def test_a_queued_job_is_told_once_whom_it_waits_behind_and_why(world):
    """The Queued message stays the same while nothing changes (one NotAdmitted event, not
    one a pass), names the job ahead and, when its latest start has come, says so."""
    await occupy_one_gpu(world)
    world.submit("big", created="2026-12-01T00:00:00Z")
    world.submit("late", replicas=1, created="2026-12-01T00:00:02Z")
    await world.reconcile("big")  # refused: waits for GPUs from now on
    world.now += 301
    first = cond(await world.reconcile("late"), "Admitted")["message"]
    world.now += 7
    again = cond(await world.reconcile("late"), "Admitted")["message"]
    assert again == first and "queued behind ml/big, waiting for GPUs since" in first
    assert "latest start" not in first
    told = [m for _, r, m in world.kube.events if r == "NotAdmitted" and "ml/big" in m]
    assert len(told) == 1, told
    world.r.due = lambda now: {"ml/big": -1.0}
    due = cond(await world.reconcile("late"), "Admitted")["message"]
    assert "queued behind ml/big" in due and "its latest start has come" in due
