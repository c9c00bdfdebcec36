"""Where a pod's time goes: Prometheus text from kube-scheduler and the extender, read before
and after a run, turned into per-pod figures (deltas, so a warm process counts only the run)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", re.M)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass
class Samples:
    """name -> list of (labels, value) from one scrape."""

    by_name: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Samples:
        out = cls()
        for name, labels, value in _SAMPLE.findall(text):
            try:
                number = float(value)
            except ValueError:
                continue
            out.by_name.setdefault(name, []).append((dict(_LABEL.findall(labels or "")),
                                                     number))
        return out

    def total(self, name: str, **match: str) -> float:
        return sum(v for labels, v in self.by_name.get(name, [])
                   if all(labels.get(k) == want for k, want in match.items()))

    def buckets(self, name: str, **match: str) -> list[tuple[float, float]]:
        """Cumulative (le, count) of a histogram, summed over the other labels."""
        acc: dict[float, float] = {}
        for labels, v in self.by_name.get(f"{name}_bucket", []):
            if all(labels.get(k) == want for k, want in match.items()):
                le = float(labels["le"].replace("+Inf", "inf"))
                acc[le] = acc.get(le, 0.0) + v
        return sorted(acc.items())


def delta_total(before: Samples, after: Samples, name: str, **match: str) -> float:
    """What a counter (or a histogram's ``_count``, ``_sum``) gained over the run."""
    return after.total(name, **match) - before.total(name, **match)


def delta_mean_ms(before: Samples, after: Samples, name: str, **match: str) -> tuple[float, float]:
    """(calls, mean ms) of a histogram over the run."""
    count = delta_total(before, after, f"{name}_count", **match)
    seconds = delta_total(before, after, f"{name}_sum", **match)
    return count, (1000 * seconds / count if count else 0.0)


def delta_quantile_ms(before: Samples, after: Samples, name: str, q: float,
                      **match: str) -> float:
    """Upper bucket bound holding quantile ``q`` of the run's observations (coarse)."""
    b = dict(before.buckets(name, **match))
    rows = [(le, c - b.get(le, 0.0)) for le, c in after.buckets(name, **match)]
    if not rows or rows[-1][1] <= 0:
        return 0.0
    want = q * rows[-1][1]
    for le, c in rows:
        if c >= want:
            return 1000 * le
    return float("inf")


STAGES = ("admission", "read", "decode", "compute", "ledger", "demand", "kube", "encode")
VERBS = ("filter", "prioritize", "bind")


def extender_breakdown(before: Samples, after: Samples) -> dict[str, dict[str, float]]:
    """Per verb: calls, mean ms in the handler, and mean ms per stage."""
    out: dict[str, dict[str, float]] = {}
    for verb in VERBS:
        calls, mean = delta_mean_ms(before, after, "sparse_extender_request_duration_seconds",
                                    verb=verb)
        if not calls:
            continue
        row = {"calls": calls, "total_ms": mean}
        for stage in STAGES:
            n, ms = delta_mean_ms(before, after, "sparse_extender_stage_duration_seconds",
                                  verb=verb, stage=stage)
            if n:
                row[stage] = ms * n / calls  # per call, also when a stage is not in every call
        out[verb] = row
    for cache in ("cycle", "shape", "node"):
        got = {r: delta_total(before, after, "sparse_extender_cost_reuse_total", cache=cache,
                              result=r)
               for r in ("hit", "miss")}
        out.setdefault("reuse", {})[cache] = got
    # The share price tables its worker process solved over the run (a failed one leaves the
    # last table in use: the placement is then priced with an older mix).
    out["prices"] = {r: delta_total(before, after, "sparse_extender_price_tables_total",
                                    result=r)
                     for r in ("installed", "dropped", "failed")}
    out["renewal"] = {
        "renewed": delta_total(before, after, "sparse_extender_cache_renewals_total",
                               result="renewed"),
        "steps": delta_total(before, after, "sparse_extender_cache_renewal_steps_total"),
        "cpu_ms": 1000 * delta_total(before, after,
                                     "sparse_extender_cache_renewal_cpu_seconds_total")}
    lag_n, lag_mean = delta_mean_ms(before, after, "sparse_extender_event_loop_lag_seconds")
    if lag_n:
        out["event loop"] = {"calls": lag_n, "total_ms": lag_mean,
                             "p99": delta_quantile_ms(
                                 before, after, "sparse_extender_event_loop_lag_seconds", 0.99)}
    return out


def scheduler_breakdown(before: Samples, after: Samples, pods: int) -> dict[str, float]:
    """kube-scheduler's own clocks, in ms per bound pod: the scheduling algorithm (in-tree
    filters/scores and the extender's filter and prioritize round trips), the whole
    scheduling attempt (cycle), and the binding-cycle plugins where it samples them."""
    out: dict[str, float] = {}
    n, ms = delta_mean_ms(before, after, "scheduler_scheduling_algorithm_duration_seconds")
    if n:
        out["algorithm_ms"] = ms
        out["attempts_per_pod"] = n / max(pods, 1)
    n, ms = delta_mean_ms(before, after, "scheduler_scheduling_attempt_duration_seconds",
                          result="scheduled")
    if n:
        out["attempt_ms"] = ms
    for point in ("PreFilter", "Filter", "PreScore", "Score", "Reserve", "PreBind", "Bind"):
        n, ms = delta_mean_ms(before, after, "scheduler_framework_extension_point_duration_seconds",
                              extension_point=point, status="Success")
        if n:
            out[f"{point.lower()}_ms"] = ms
            out[f"{point.lower()}_calls"] = n / max(pods, 1)
    # OpportunisticBatching (on by default since 1.35, and off in a profile with extenders):
    # a pod that reuses the previous identical pod's sorted nodes skips filtering and scoring.
    hinted = delta_total(before, after, "scheduler_batch_attempts_total", result="hint_used")
    out["hinted_per_pod"] = hinted / max(pods, 1)
    return out


def api_requests(before: Samples, after: Samples, pods: int) -> dict[str, float]:
    """API server requests per bound pod over the run, by verb and resource (and
    subresource), from its apiserver_request_total; the bench's own requests included."""
    counts: dict[str, float] = {}
    for sign, samples in ((-1.0, before), (1.0, after)):
        for labels, value in samples.by_name.get("apiserver_request_total", []):
            what = labels.get("resource", "")
            if labels.get("subresource"):
                what += "/" + labels["subresource"]
            key = f"{labels.get('verb', '?')} {what}"
            counts[key] = counts.get(key, 0.0) + sign * value
    return {k: v / max(pods, 1) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])
            if v > 0}
