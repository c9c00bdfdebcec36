"""The request path's light counters and histograms expose what prometheus_client's own
families expose for the same observations (bar the ``_created`` series)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from extender.lightmetrics import LightCounter, LightHistogram

BUCKETS = (0.001, 0.01, 0.1, 1.0)
VALUES = (0.0, 0.001, 0.0011, 0.05, 0.1, 3.0, 0.5)


def page(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines()
            if "_created" not in line]


def test_same_exposition_as_prometheus_client() -> None:
    light, reference = CollectorRegistry(), CollectorRegistry()
    h1 = LightHistogram("x_seconds", "doc", ["verb"], BUCKETS, registry=light)
    h2 = Histogram("x_seconds", "doc", ["verb"], buckets=BUCKETS, registry=reference)
    c1 = LightCounter("y_total", "doc", ["verb", "code"], registry=light)
    c2 = Counter("y_total", "doc", ["verb", "code"], registry=reference)
    for verb in ("filter", "bind"):
        for v in VALUES:
            h1.labels(verb).observe(v)
            h2.labels(verb).observe(v)
            c1.labels(verb, "200").inc()
            c2.labels(verb, "200").inc()
    c1.labels("bind", "500").inc(2)
    c2.labels("bind", "500").inc(2)
    assert page(light) == page(reference)
