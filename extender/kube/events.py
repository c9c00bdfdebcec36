"""Kubernetes Events on pods, explaining placement decisions; rate-limited per pod and reason."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import socket
import time

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from extender.kube.answers import checked
from extender.outcome import Outcome

log = logging.getLogger("sparse.kube.events")

COMPONENT = "sparse-extender"
REPEAT_AFTER_S = 60.0  # the same reason for the same pod is posted at most this often
MAX_MESSAGE = 1000


class EventRecorder:
    def __init__(self, api: client.ApiClient, success_events: bool = False) -> None:
        self._success = success_events
        self._core = client.CoreV1Api(api)
        self._last: dict[tuple[str, str], float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._instance = socket.gethostname()

    def observe(self, outcome: Outcome) -> None:
        if outcome.ok and outcome.reservation is not None and self._success:
            gpus = ",".join(outcome.reservation.gpus)
            self._post(outcome, "Normal", "GPUsAssigned",
                       f"GPUs {gpus} on {outcome.reservation.node}")
        elif outcome.verb == "wait":  # held back on purpose (verbs/localitywait.py)
            self._post(outcome, "Normal", "WaitingForCachedNode", outcome.message)
        elif not outcome.ok:
            reason = "FailedGPUPlacement" if outcome.verb == "filter" else "FailedGPUBinding"
            self._post(outcome, "Warning", reason, outcome.message)

    def note(self, pod: dict, reason: str, message: str) -> None:
        """A Normal event on ``pod`` (a watched object), rate-limited as the others."""
        meta = pod.get("metadata") or {}
        outcome = Outcome("note", meta.get("namespace", ""), meta.get("name", ""),
                          meta.get("uid", ""), True, message)
        self._post(outcome, "Normal", reason, message)

    def _post(self, outcome: Outcome, kind: str, reason: str, message: str) -> None:
        key = (outcome.uid, reason + message)
        now = time.monotonic()
        if now - self._last.get(key, -REPEAT_AFTER_S) < REPEAT_AFTER_S:
            return
        self._last[key] = now
        if len(self._last) > 50_000:
            self._last.clear()
        task = asyncio.get_running_loop().create_task(self._create(outcome, kind, reason,
                                                                   message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _create(self, outcome: Outcome, kind: str, reason: str, message: str) -> None:
        stamp = dt.datetime.now(dt.UTC)
        body = {
            "metadata": {"generateName": f"{outcome.name}.", "namespace": outcome.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": outcome.name,
                               "namespace": outcome.namespace, "uid": outcome.uid},
            "type": kind, "reason": reason, "message": message[:MAX_MESSAGE],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": self._instance,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            response = await checked(self._core.create_namespaced_event(
                outcome.namespace, body, _preload_content=False))
            response.release()
        except ApiException as exc:
            log.debug("event for %s not posted: %s", outcome.pod, exc.status)

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
