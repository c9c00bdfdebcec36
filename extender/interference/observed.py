"""Pair slowdowns observed on running jobs, and the class matrix they correct. Pure.

The pair worker (``extender.pairworker``) turns jobs' reported step times into observations of
``norm(victim | co-runner)`` per class pair and keeps an exponentially weighted estimate of
each in Redis (hash ``PAIRS_KEY``, field ``"<victim>|<co-runner>"``, value JSON). The extender
(``extender.livepairs``) reads them back and places the next pods with :func:`blend`: the
measured prior moves toward the observations as they accumulate,

    norm(a|b) = w * observed + (1 - w) * prior,   w = n / (n + PRIOR_WEIGHT)

where ``n`` counts the observations behind the estimate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from extender.interference.matrix import InterferenceMatrix

PAIRS_KEY = "sparse:interference:pairs"
VERSION_KEY = "sparse:interference:version"
SOLO_KEY = "sparse:interference:solo"  # pod -> step time measured alone on its GPU
PRIOR_WEIGHT = 3.0  # observations worth as much as the measured prior
ALPHA = 0.3  # weight of a new observation in the running estimate
NORM_MIN = 0.02


@dataclass(frozen=True, slots=True)
class PairEstimate:
    norm: float
    n: int
    updated_at: float

    def encode(self) -> str:
        return json.dumps({"norm": round(self.norm, 5), "n": self.n,
                           "updated_at": round(self.updated_at, 3)})

    @classmethod
    def decode(cls, raw: str | bytes) -> PairEstimate | None:
        try:
            doc = json.loads(raw)
            norm, n = float(doc["norm"]), int(doc["n"])
        except (ValueError, KeyError, TypeError):
            return None
        if not (NORM_MIN <= norm <= 1.0) or n < 1:
            return None
        return cls(norm, n, float(doc.get("updated_at", 0.0) or 0.0))


def pair_field(victim: str, co_runner: str) -> str:
    return f"{victim}|{co_runner}"


def update(old: PairEstimate | None, observed: float, now: float,
           alpha: float = ALPHA) -> PairEstimate:
    observed = float(np.clip(observed, NORM_MIN, 1.0))
    if old is None:
        return PairEstimate(observed, 1, now)
    return PairEstimate((1 - alpha) * old.norm + alpha * observed, old.n + 1, now)


def parse_pairs(fields: dict) -> dict[tuple[str, str], PairEstimate]:
    out = {}
    for key, raw in fields.items():
        key = key.decode() if isinstance(key, bytes) else str(key)
        victim, sep, co_runner = key.partition("|")
        est = PairEstimate.decode(raw)
        if sep and victim and co_runner and est is not None:
            out[(victim, co_runner)] = est
    return out


def blend(prior: InterferenceMatrix, estimates: dict[tuple[str, str], PairEstimate],
          prior_weight: float = PRIOR_WEIGHT) -> InterferenceMatrix:
    """The prior with each observed class pair moved toward its estimate. Pairs of classes
    the matrix does not know are ignored (they would all land on ``unknown``)."""
    norm = prior.norm.copy()
    for (victim, co_runner), est in estimates.items():
        if not (prior.knows(victim) and prior.knows(co_runner)):
            continue
        a, b = prior.index(victim), prior.index(co_runner)
        w = est.n / (est.n + prior_weight)
        norm[a, b] = w * est.norm + (1 - w) * norm[a, b]
    return InterferenceMatrix(prior.classes, norm)
