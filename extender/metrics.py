"""Every Prometheus metric of the extender, defined once (tabled in docs/metrics.md).

Per-GPU gauges are computed at scrape time from the live ClusterState by a collector, so the
hot path never touches 40,000 label sets. Base units (bytes, ratios 0-1), no ``_created`` series,
process/platform collectors and ``sparse_build_info``: see :mod:`extender.telemetry`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from extender import telemetry
from extender.gpu_page import FAMILIES as GPU_FAMILIES
from extender.gpu_page import GpuPage, gpu_values
from extender.lightmetrics import HistogramChild, LightCounter, LightHistogram
from extender.outcome import Outcome
from extender.placement.state import ClusterState

MIB = 1024 * 1024  # the ledger books MiB; metrics are in bytes
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self, state: Callable[[], ClusterState]) -> None:
        self.registry: CollectorRegistry = telemetry.new_registry("extender")
        # The request path's own series: light children (extender.lightmetrics).
        self.requests = LightCounter(
            "sparse_extender_requests_total",
            "Extender HTTP requests by verb and outcome.",
            ["verb", "code"],
            registry=self.registry,
        )
        self.latency = LightHistogram(
            "sparse_extender_request_duration_seconds",
            "Extender request latency by verb.",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.failures = Counter(
            "sparse_extender_request_failures_total",
            "Verb requests answered with an Error for the scheduler to retry, by reason"
            " (overloaded: no slot within --queue-timeout; error: e.g. the store unreachable).",
            ["verb", "reason"],
            registry=self.registry,
        )
        self.decisions = Counter(
            "sparse_extender_decisions_total",
            "Scheduling decisions by verb and result (ok, rejected).",
            ["verb", "result"],
            registry=self.registry,
        )
        self.interference = Histogram(
            "sparse_extender_placement_interference_ratio",
            "Throughput lost by each bound share and the jobs already on its GPU (pairwise"
            " model), as a fraction of one GPU's throughput; 0 = an empty GPU.",
            buckets=(0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0),
            registry=self.registry,
        )
        self.stages = LightHistogram(
            "sparse_extender_stage_duration_seconds",
            "Time of each verb call by stage: admission (waiting for a slot), read, decode,"
            " compute (placement), ledger, demand (predictions), kube (API calls), encode.",
            ["verb", "stage"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.loop_lag = Histogram(
            "sparse_extender_event_loop_lag_seconds",
            "How late the event loop runs a timer: time a ready request waits for the loop.",
            buckets=(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=self.registry,
        )
        self._stage_children: dict[tuple[str, str], HistogramChild] = {}
        self._ledger = _LedgerCollector(state)
        self.registry.register(self._ledger)

    def render(self) -> bytes:
        """The /metrics page: the registry's families, then the per-GPU ones written in bulk
        (``extender.gpu_page``; the same series ``registry.collect()`` yields)."""
        self._ledger.per_gpu = False
        try:
            head = generate_latest(self.registry)
        finally:
            self._ledger.per_gpu = True
        return head + self._ledger.page.render(self._ledger._state())

    def watch_cost_reuse(self, counts: Callable[[], dict[tuple[str, str], float]]) -> None:
        """``counts``: (cache, result) -> running total, read at scrape time."""
        self.registry.register(_CountsCollector(
            "sparse_extender_cost_reuse",
            "Placement costs reused instead of recomputed: cycle = prioritize calls answered"
            " with filter's costs (hit) or not (miss); shape = candidate GPUs whose costs came"
            " from an earlier pod of the same shape (hit) or nodes recomputed (miss); node ="
            " filter's fit and cost verdicts per node kept for the pod's shape (hit) or"
            " computed (miss).",
            ["cache", "result"], counts))

    def watch_price_tables(self, counts: Callable[[], dict[str, float]]) -> None:
        """``counts``: result (installed, dropped, failed) -> running total of the share price
        tables solved off the request path (``extender.pricesolver``), read at scrape time."""
        self._watch_results(
            "sparse_extender_price_tables",
            "Share price tables solved in the price worker: installed (taken into use with"
            " its mix once the caches are priced for both), dropped (the learned mix was"
            " re-read while it was solved), failed (the last table stays in use).", counts)

    def watch_renewals(self, counts: Callable[[], dict[str, float]]) -> None:
        """``counts``: result (renewed, failed) -> running total of the policy's new inputs
        taken into use with caches priced ahead (``extender.verbs.renewal``)."""
        self._watch_results(
            "sparse_extender_cache_renewals",
            "New policy inputs (a re-read pod mix with its share price table) taken into use"
            " between requests: renewed (the caches were priced for them in idle time),"
            " failed (logged; priced on demand instead).", counts)

    def watch_renewal_work(self, work: Callable[[], tuple[float, float]]) -> None:
        """``work``: (steps, CPU seconds) the cache renewal ran so far, read at scrape time."""
        for name, doc, at in (
                ("sparse_extender_cache_renewal_steps",
                 "Steps of the cache renewal run between requests (a slice of nodes priced"
                 " with new inputs, or the swap).", 0),
                ("sparse_extender_cache_renewal_cpu_seconds",
                 "CPU seconds the serving thread spent in the cache renewal's steps.", 1)):
            self.registry.register(_CountsCollector(
                name, doc, [], lambda at=at: {(): work()[at]}))

    def watch_locality_waits(self, count: Callable[[], float]) -> None:
        """``count``: filters so far that kept a reader waiting (verbs/localitywait.py)."""
        self.registry.register(_CountsCollector(
            "sparse_locality_waits",
            "Filters that kept an embedding reader waiting for a node whose cache holds its"
            " tables (--locality-max-wait).", [], lambda: {(): float(count())}))

    def _watch_results(self, name: str, documentation: str,
                       counts: Callable[[], dict[str, float]]) -> None:
        """A counter per ``result`` label, read from ``counts`` at scrape time."""
        self.registry.register(_CountsCollector(
            name, documentation, ["result"],
            lambda: {(result,): n for result, n in counts().items()}))

    def observe_stages(self, verb: str, times: dict[str, float]) -> None:
        """One call's stages; compute is the verb's time less what it waited for."""
        children = self._stage_children
        for stage, seconds in times.items():  # (read, not copied: two calls per cycle)
            if stage == "verb":
                waited = times.get("ledger", 0.0) + times.get("demand", 0.0) + times.get(
                    "kube", 0.0)
                stage, seconds = "compute", max(seconds - waited, 0.0)
            child = children.get((verb, stage))
            if child is None:  # labels() costs a lock and a lookup: once per pair
                child = children[(verb, stage)] = self.stages.labels(verb, stage)
            child.observe(seconds)

    def observe(self, outcome: Outcome) -> None:
        if outcome.verb == "wait":  # a reader held back on purpose: sparse_locality_waits
            return
        self.decisions.labels(outcome.verb, "ok" if outcome.ok else "rejected").inc()
        if outcome.ok and outcome.interference is not None:
            self.interference.observe(outcome.interference)


class _CountsCollector(Collector):
    """A counter family read at scrape time: ``counts()`` maps label values to totals."""

    def __init__(self, name: str, documentation: str, labels: list[str],
                 counts: Callable[[], dict[tuple[str, ...], float]]) -> None:
        self._name, self._documentation, self._labels = name, documentation, labels
        self._counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self._name, self._documentation, labels=self._labels)
        for values, value in self._counts().items():
            family.add_metric(list(values), value)
        yield family


class _LedgerCollector(Collector):
    def __init__(self, state: Callable[[], ClusterState]) -> None:
        self._state = state
        self.per_gpu = True  # off while Metrics.render writes those families in bulk
        self.page = GpuPage()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self._state()
        reservations = GaugeMetricFamily(
            "sparse_ledger_reservations", "Reservations in the ledger by state.", labels=["state"]
        )
        by_state: dict[str, int] = {"reserved": 0, "bound": 0}
        for r in state.reservations.values():
            by_state[r.state] = by_state.get(r.state, 0) + 1
        for name, count in by_state.items():
            reservations.add_metric([name], count)
        yield reservations
        if not self.per_gpu:
            return
        labels = ["gpu", "node", "model"]
        families = [GaugeMetricFamily(name, doc, labels=labels, unit=unit)
                    for name, doc, unit in GPU_FAMILIES]
        columns = [v.tolist() for v in gpu_values(state)]
        for i, uuid in enumerate(state.gpu_uuid):
            key = [uuid, state.node_names[state.gpu_node[i]], state.models[state.gpu_model[i]]]
            for family, column in zip(families, columns, strict=True):
                family.add_metric(key, column[i])
        yield from families


class LedgerHealthCollector(Collector):
    """The ledger store's reachability and the bind upkeep's counts, read at scrape time."""

    def __init__(self, scheduler: Any) -> None:  # extender.service.Scheduler
        self._s = scheduler

    def collect(self) -> Iterator[Any]:
        s = self._s
        up = GaugeMetricFamily("sparse_ledger_up", "1 while the ledger's store is reachable.")
        up.add_metric([], 1.0 if s.health.ok else 0.0)
        outages = CounterMetricFamily("sparse_ledger_outages",
                                      "Times the ledger's store became unreachable.")
        outages.add_metric([], float(s.health.outages))
        reclaimed = CounterMetricFamily(
            "sparse_ledger_reclaimed",
            "Bookings left by binds that answered an error (their rollback could not reach"
            " the store), dropped later by the upkeep.")
        reclaimed.add_metric([], float(s.upkeep.reclaimed))
        expired = CounterMetricFamily("sparse_ledger_expired",
                                      "Unbound bookings dropped at their deadline.")
        expired.add_metric([], float(s.upkeep.expired))
        pending = GaugeMetricFamily(
            "sparse_ledger_upkeep_pending",
            "Bookings of failed binds waiting to be dropped or bound pods waiting to be"
            " confirmed (the store was unreachable).")
        pending.add_metric([], float(s.upkeep.pending))
        yield from (up, outages, reclaimed, expired, pending)
