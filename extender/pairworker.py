"""Pair worker: learns how co-located jobs slow each other from their reported step times.

Each round it asks Prometheus for every job's recent step time (``sparse_job_step_seconds``,
exported by ``extender.jobmetrics`` or a sidecar) and solo step time, groups the jobs by the
GPU they run on, and turns each sharing job's speed (solo / current step time) into an
observation of ``norm(victim class | co-runner class)``; with k co-runners the slowdown is
split evenly among them in log space (speed ** (1/k) each). Estimates are kept in Redis
(``extender.interference.observed``); a job seen alone on its GPU refreshes its solo step time
there, for jobs that export none. The extender reads the estimates for its next placements.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass

import aiohttp
import redis.asyncio as aioredis

from extender.interference.observed import (
    ALPHA,
    PAIRS_KEY,
    SOLO_KEY,
    VERSION_KEY,
    PairEstimate,
    pair_field,
    update,
)

log = logging.getLogger("sparse.pairworker")

STEP = "sparse_job_step_seconds"
SOLO = "sparse_job_solo_step_seconds"


@dataclass(frozen=True, slots=True)
class JobSample:
    namespace: str
    pod: str
    job_class: str
    gpu: str
    step_s: float
    solo_s: float | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.pod}"


async def query(session: aiohttp.ClientSession, base: str, expr: str) -> list[dict]:
    async with session.get(f"{base.rstrip('/')}/api/v1/query", params={"query": expr}) as resp:
        text = await resp.text()
    try:  # a Prometheus that is still starting answers 503 in plain text, not JSON
        doc = json.loads(text)
    except ValueError:
        raise RuntimeError(f"Prometheus query {expr!r}: HTTP {resp.status}: {text[:200]!r}"
                           ) from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        raise RuntimeError(f"Prometheus query {expr!r} failed: {doc.get('error', doc)}")
    return doc["data"]["result"]


def _series(result: list[dict]) -> dict[tuple[str, str], tuple[dict, float]]:
    out = {}
    for item in result:
        labels = item.get("metric", {})
        try:
            value = float(item["value"][1])
        except (KeyError, IndexError, ValueError):
            continue
        if math.isfinite(value) and value > 0:
            out[(labels.get("namespace", ""), labels.get("pod", ""))] = (labels, value)
    return out


async def collect(session: aiohttp.ClientSession, base: str, window: str = "2m") -> list[JobSample]:
    steps = _series(await query(session, base, f"avg_over_time({STEP}[{window}])"))
    solos = _series(await query(session, base, f"max_over_time({SOLO}[{window}])"))
    out = []
    for key, (labels, step) in steps.items():
        solo = solos.get(key)
        out.append(JobSample(key[0], key[1], labels.get("job_class", "unknown") or "unknown",
                             labels.get("gpu", ""), step, solo[1] if solo else None))
    return out


def observations(samples: list[JobSample], solo_known: dict[str, float]
                 ) -> tuple[list[tuple[str, str, float]], dict[str, float]]:
    """(pair observations (victim class, co-runner class, norm), step times of jobs alone)."""
    by_gpu: dict[str, list[JobSample]] = defaultdict(list)
    for s in samples:
        if s.gpu and s.gpu != "unknown":
            by_gpu[s.gpu].append(s)
    pairs: list[tuple[str, str, float]] = []
    alone: dict[str, float] = {}
    for jobs in by_gpu.values():
        if len(jobs) == 1:
            alone[jobs[0].key] = jobs[0].step_s
            continue
        for victim in jobs:
            solo = victim.solo_s or solo_known.get(victim.key)
            if not solo:
                continue
            speed = min(1.0, solo / victim.step_s)
            others = [o for o in jobs if o is not victim]
            share = speed ** (1.0 / len(others))
            pairs += [(victim.job_class, o.job_class, share) for o in others]
    return pairs, alone


async def store(client: aioredis.Redis, pairs: list[tuple[str, str, float]],
                alone: dict[str, float], now: float, alpha: float = ALPHA) -> int:
    """Fold the observations into the estimates; returns the number of pair fields written."""
    if alone:
        await client.hset(SOLO_KEY, mapping={k: f"{v:.6g}" for k, v in alone.items()})
    if not pairs:
        return 0
    fields = sorted({pair_field(a, b) for a, b, _ in pairs})
    current = dict(zip(fields, await client.hmget(PAIRS_KEY, fields), strict=True))
    estimates = {f: PairEstimate.decode(raw) if raw is not None else None
                 for f, raw in current.items()}
    for a, b, norm in pairs:
        f = pair_field(a, b)
        estimates[f] = update(estimates[f], norm, now, alpha)
    async with client.pipeline(transaction=True) as pipe:
        pipe.hset(PAIRS_KEY, mapping={f: e.encode() for f, e in estimates.items()})
        pipe.incr(VERSION_KEY)
        await pipe.execute()
    return len(estimates)


async def run_once(prometheus: str, client: aioredis.Redis, window: str = "2m",
                   alpha: float = ALPHA) -> dict:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        samples = await collect(session, prometheus, window)
    raw = await client.hgetall(SOLO_KEY)
    solo_known = {k.decode(): float(v) for k, v in raw.items()}
    pairs, alone = observations(samples, solo_known)
    written = await store(client, pairs, alone, time.time(), alpha)
    return {"jobs": len(samples), "observations": len(pairs), "pairs_written": written,
            "alone": len(alone)}


async def run_forever(prometheus: str, redis_url: str, interval_s: float = 30.0,
                      window: str = "2m", alpha: float = ALPHA) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        while True:
            try:
                log.info("pair round: %s", await run_once(prometheus, client, window, alpha))
            except Exception as exc:  # noqa: BLE001 - keep the worker alive across outages
                log.warning("pair round failed: %s", exc)
            await asyncio.sleep(interval_s)
    finally:
        await client.aclose()
