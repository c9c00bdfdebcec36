"""The latest-start queue order on the real control plane: a long RecommendDLJob waits behind
running work with short jobs queued ahead of it (shortest first); once the submitted work
drains in less time than the long job may really run, its latest start has come and it is
admitted ahead of the short ones when GPUs free.

The controller runs with ``--max-pass-over 0`` so that admission follows the queue order
exactly (no backfill past a refused job): which job gets the freed GPUs then depends on the
order alone, not on which job's timer fires first. The bands span 1 s .. 1,000 s so that the
predicted run times, and the wait for the promotion, are seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from controller_proc import Controller
from test_jobs import (  # noqa: F401 (crds, stack: fixtures)
    DLRM,
    SLOT_TTL,
    condition,
    crds,
    delete_job,
    get_job,
    gpu_node,
    job_manifest,
    stack,
    wait_for,
    worker_pods,
)

from controller.prediction import predict
from extender.queueorder import DurationBands

pytestmark = pytest.mark.e2e

PREFIX = "e2e-latest"
BANDS = DurationBands.log_spaced(1, 1000, 4, order="latest-start", prefix=PREFIX)
SHORTS = [f"short-{i}" for i in range(3)]


def steps_for(seconds: float) -> int:
    """``spec.steps`` whose predicted run time (steps x the predicted step time) is
    ``seconds``."""
    return max(1, round(seconds / predict(DLRM).step_s))


def priority_classes() -> list[dict[str, Any]]:
    """The bands' classes, as the chart installs them (non-preempting)."""
    named = [(BANDS.class_name(b), BANDS.priority(b)) for b in range(BANDS.count)]
    named.append((BANDS.gang_class_name(), BANDS.gang_priority()))
    return [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": name}, "value": value, "preemptionPolicy": "Never",
             "globalDefault": False} for name, value in named]


def phase(env: Any, name: str) -> str | None:
    return (get_job(env, name).get("status") or {}).get("phase")


def events(env: Any, name: str) -> list[dict[str, Any]]:
    out = env.cluster.kubectl("get", "events", "--field-selector",
                              f"involvedObject.kind=RecommendDLJob,involvedObject.name={name}",
                              "-o", "json")
    return json.loads(out.stdout)["items"]


def wide_rows(table: str) -> dict[str, dict[str, str]]:
    """``kubectl get -o wide`` rows by name, cut at the header's columns (an unset date
    column is blank)."""
    header, *lines = table.splitlines()
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    spans = list(zip(starts, [*starts[1:], None], strict=True))
    rows = [{header[a:b].strip(): line[a:b].strip() for a, b in spans} for line in lines]
    return {row["NAME"]: row for row in rows}


def queued_behind_long(env: Any, name: str) -> bool:
    admitted = condition(get_job(env, name), "Admitted")
    return admitted.get("reason") == "Queued" and "queued behind default/long" in \
        admitted.get("message", "") and "latest start has come" in admitted["message"]


@contextmanager
def latest_start_controller(env: Any, tmp_path: Path, name: str) -> Iterator[None]:
    """The bands' PriorityClasses and, in place of the stack's controller, one ordering by
    latest start (bands over 1-1,000 s, admission exactly in queue order); the classes are
    removed afterwards."""
    c = env.cluster
    c.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(x)
                                                        for x in priority_classes()))
    env.ctl.stop()
    env.ctl = Controller(tmp_path, c.kubeconfig, env.ext.url, slot_ttl=SLOT_TTL,
                         name=name, max_pass_over=0,
                         extra=("--queue-order", "latest-start", "--queue-band-range", "1:1000",
                                "--priority-class-prefix", PREFIX)).start()
    try:
        yield
    finally:
        c.kubectl("delete", "priorityclass", *(x["metadata"]["name"]
                                               for x in priority_classes()),
                  "--ignore-not-found", check=False)


def test_a_long_job_whose_latest_start_has_come_is_admitted_ahead_of_shorter_ones(
        stack: Any, tmp_path: Path) -> None:  # noqa: F811 (the fixture)
    env, c = stack, stack.cluster
    with latest_start_controller(env, tmp_path, "latest-start"):
        gpu_node(c)  # 4 GPUs, one worker of DLRM per GPU
        # 1. Running work takes every GPU (predicted 10 s; it runs on past that).
        c.kubectl("apply", "-f", "-", input=json.dumps(job_manifest(
            "running", replicas=4, steps=steps_for(10))))
        wait_for(env, lambda: phase(env, "running") == "Scheduled", 90, "running scheduled")
        # 2. A long job (4 workers, predicted 40 s) and three short ones (1 worker, 3 s).
        c.kubectl("apply", "-f", "-", input=json.dumps(job_manifest(
            "long", replicas=4, steps=steps_for(40))))
        for name in SHORTS:
            c.kubectl("apply", "-f", "-", input=json.dumps(job_manifest(
                name, replicas=1, steps=steps_for(3))))
        short_band = wait_for(env, lambda: (get_job(env, "short-2").get("status") or {})
                              .get("queueBand"), 60, "short band")
        assert short_band["name"] == f"{PREFIX}-0"  # shortest first: the highest priority

        # 3. The submitted work drains in less time than the long job may run: it is due.
        long = wait_for(env, lambda: (j := get_job(env, "long"))
                        and (j.get("status") or {}).get("queueBand", {}).get("dueSince")
                        and j, 240, "the long job's latest start")
        band = long["status"]["queueBand"]
        assert (band["name"], band["band"]) == (f"{PREFIX}-2", 2)
        assert band["priority"] == BANDS.priority(2) < short_band["priority"]
        assert abs(band["predictedSeconds"] - 40) <= 1
        assert band["errorBound"] > band["medianError"] > 0
        told = [e for e in events(env, "long") if e["reason"] == "LatestStart"]
        assert told and "goes ahead of every band" in told[0]["message"], told
        assert long["status"]["phase"] == "Pending"
        rows = wide_rows(c.kubectl("get", "rdj", "-o", "wide").stdout)
        assert rows["long"]["BAND"] == f"{PREFIX}-2" and rows["long"]["DUE"], rows
        assert rows["short-0"]["BAND"] == f"{PREFIX}-0" and not rows["short-0"]["DUE"], rows
        # the short jobs now wait behind it, and are told why
        for name in SHORTS:
            wait_for(env, lambda n=name: queued_behind_long(env, n), 60,
                     f"{name} queued behind the due job")

        # 4. The running work ends: the GPUs go to the long job, not the short ones.
        delete_job(env, "running")
        wait_for(env, lambda: phase(env, "long") in ("Admitted", "Scheduled"), 90,
                 "the long job admitted")
        for name in SHORTS:
            assert phase(env, name) == "Pending", get_job(env, name)["status"]
        pods = [p for p in worker_pods(env) if p["metadata"]["name"].startswith("long-")]
        assert len(pods) == 4
        assert {p["spec"]["priorityClassName"] for p in pods} == {f"{PREFIX}-2"}

        # 5. It ends in turn: the short ones run, shortest band first as before.
        delete_job(env, "long")
        wait_for(env, lambda: all(phase(env, n) in ("Admitted", "Scheduled") for n in SHORTS),
                 90, "the short jobs admitted")
