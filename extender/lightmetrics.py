"""Counters and histograms for the request path, a few times cheaper per observation than
prometheus_client's: a scheduling cycle records a dozen (latency, count and each stage of
both verbs), and each of those takes a lock and walks the bucket list there.

These children are plain Python numbers read at scrape time by a collector; they are meant
for the extender's event loop (one thread). The exposition is what prometheus_client writes
for its own families of the same name (``_bucket``/``_count``/``_sum``, ``_total``), without
``_created`` series.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class HistogramChild:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket (not cumulative); the last: +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # bucket le=b counts values <= b: the first bound not below the value
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class _Family(Collector):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry | None) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], object] = {}
        if registry is not None:
            registry.register(self)

    def _new(self) -> object:
        raise NotImplementedError

    def labels(self, *values: str):  # type: ignore[no-untyped-def]
        key = tuple(str(v) for v in values)
        if len(key) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {key}")
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._new()
        return child

    def describe(self) -> Iterator:
        return iter(())  # collected only at scrape time; names checked there


class LightHistogram(_Family):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 buckets: Sequence[float], registry: CollectorRegistry | None = None) -> None:
        super().__init__(name, documentation, labelnames, registry)
        self.bounds = tuple(float(b) for b in buckets if b != float("inf"))

    def _new(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation,
                                       labels=list(self.labelnames))
        edges = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        for key, child in list(self._children.items()):
            assert isinstance(child, HistogramChild)
            running, buckets = 0, []
            for edge, count in zip(edges, child.counts, strict=True):
                running += count
                buckets.append((edge, running))
            family.add_metric(list(key), buckets, child.sum)
        yield family


class LightCounter(_Family):
    def _new(self) -> CounterChild:
        return CounterChild()

    def collect(self) -> Iterator[CounterMetricFamily]:
        name = self.name.removesuffix("_total")
        family = CounterMetricFamily(name, self.documentation, labels=list(self.labelnames))
        for key, child in list(self._children.items()):
            assert isinstance(child, CounterChild)
            family.add_metric(list(key), child.value)
        yield family
