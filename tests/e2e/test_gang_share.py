"""The long gangs' share on the real control plane (queue order ``latest-start``): a long gang
goes ahead of every band only while the running long gangs book fewer GPUs than their share
of the predicted work left x the cluster's GPUs.

One node of 4 GPUs; every worker asks for one whole GPU. A long gang of 2 workers runs beside
two long one-GPU jobs that carry most of the predicted work (2 x 6,000 s against the gangs'
2 x 2 x 2,000 s: the gangs' share is 0.4 x 4 = 1.6 GPUs, the running gang books 2). A second
long gang then waits in its own band, behind shorter jobs, and its status and Queued message
say so. Once the running gang ends, nothing of the gangs runs: the waiting gang goes ahead of
every band again and takes the freed GPUs before the short jobs.

Every job is submitted within a minute, so the arrivals far outpace the GPUs and no job's
latest start comes during the test (the order seen is the gangs' share, not a due job). The
controller runs with ``--max-pass-over 0`` so that admission follows the queue order exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_jobs import (  # noqa: F401 (crds, stack: fixtures)
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
from test_latest_start import BANDS, latest_start_controller, phase, steps_for

pytestmark = pytest.mark.e2e

GANG_S, LONG_ONE_S, SHORT_S = 2_000, 6_000, 3
SHORTS = ["short-0", "short-1"]


def band(env: Any, name: str) -> dict[str, Any]:
    return (get_job(env, name).get("status") or {}).get("queueBand") or {}


def queued_behind(env: Any, name: str, ahead: str) -> str | None:
    """The job's Queued message when it waits behind ``ahead``; None otherwise."""
    admitted = condition(get_job(env, name), "Admitted")
    message = admitted.get("message", "")
    return message if admitted.get("reason") == "Queued" and \
        f"queued behind default/{ahead}," in message else None


def apply(env: Any, name: str, replicas: int, seconds: float) -> None:
    """A job whose workers each ask for one whole GPU: two or more workers are a gang."""
    job = job_manifest(name, replicas=replicas, steps=steps_for(seconds))
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    trainer["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    env.cluster.kubectl("apply", "-f", "-", input=json.dumps(job))


def test_a_long_gang_waits_in_its_band_while_the_running_gangs_hold_their_share(
        stack: Any, tmp_path: Path) -> None:  # noqa: F811 (the fixture)
    env, c = stack, stack.cluster
    with latest_start_controller(env, tmp_path, "gang-share"):
        gpu_node(c)  # 4 GPUs
        long_band = BANDS.band(GANG_S)
        assert BANDS.is_critical_gang(long_band, 2) and BANDS.band(LONG_ONE_S) == long_band
        # 1. A long gang runs (2 GPUs) beside two long one-GPU jobs (not gangs): full.
        apply(env, "gang-a", 2, GANG_S)
        wait_for(env, lambda: phase(env, "gang-a") == "Scheduled", 90, "gang-a scheduled")
        for name in ("one-0", "one-1"):
            apply(env, name, 1, LONG_ONE_S)
        wait_for(env, lambda: all(phase(env, n) == "Scheduled" for n in ("one-0", "one-1")),
                 90, "the long one-GPU jobs scheduled")
        running = band(env, "gang-a")
        assert running["name"] == BANDS.gang_class_name()
        assert running["bandPriority"] == BANDS.priority(long_band)
        assert "bandPriority" not in band(env, "one-0")  # one GPU: not a gang

        # 2. A second long gang and two short jobs wait.
        apply(env, "gang-b", 2, GANG_S)
        for name in SHORTS:
            apply(env, name, 1, SHORT_S)
        waiting = wait_for(env, lambda: band(env, "gang-b").get("bandPriority") is not None
                           and band(env, "gang-b"), 60, "gang-b's band")
        assert (waiting["name"], waiting["priority"]) == (BANDS.gang_class_name(),
                                                          BANDS.gang_priority())
        assert waiting["bandPriority"] == BANDS.priority(long_band)
        short = wait_for(env, lambda: band(env, "short-1"), 60, "short-1's band")
        assert short["priority"] == BANDS.priority(0) > waiting["bandPriority"]
        # the running gang holds its share: gang-b ranks in its band, behind the short jobs,
        # and is told why; the short jobs queue behind each other, not behind gang-b
        told = wait_for(env, lambda: queued_behind(env, "gang-b", "short-0"), 90,
                        "gang-b queued behind the short jobs")
        assert "long gangs hold their share of the GPUs" in told, told
        assert f"priority {BANDS.priority(long_band)}" in told, told
        wait_for(env, lambda: queued_behind(env, "short-1", "short-0"), 60,
                 "short-1 queued behind short-0")
        assert "dueSince" not in band(env, "gang-b")  # the order is the share, not a due job
        assert phase(env, "gang-b") == "Pending"

        # 3. The running gang ends: the gangs run nothing, so gang-b goes ahead of every band
        # again and takes the freed GPUs; the short jobs wait behind it.
        delete_job(env, "gang-a")
        wait_for(env, lambda: phase(env, "gang-b") in ("Admitted", "Scheduled"), 90,
                 "gang-b admitted")
        for name in SHORTS:
            assert phase(env, name) == "Pending", get_job(env, name)["status"]
        pods = [p for p in worker_pods(env) if p["metadata"]["name"].startswith("gang-b-")]
        assert len(pods) == 2
        assert {p["spec"]["priorityClassName"] for p in pods} == {BANDS.gang_class_name()}
        assert "dueSince" not in band(env, "gang-b")
