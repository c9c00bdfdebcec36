"""Helpers the verbs share: node reasons grouped for events, scores for pods without GPUs."""

from __future__ import annotations

from extender.protocol import HostPriority, Pod


def zero_scores(names: list[str]) -> list[HostPriority]:
    return [HostPriority(Host=n, Score=0) for n in names]


def pod_ref(pod: Pod) -> tuple[str, str, str]:
    return (pod.metadata.namespace or "default", pod.metadata.name, pod.metadata.uid)


def summarize(failed: dict[str, str], unresolvable: dict[str, str], limit: int = 4) -> str:
    """Node reasons for a one-line event: each distinct reason once, most nodes first (the
    placement core already names its node count; other reasons get one)."""
    counts: dict[str, int] = {}
    for reason in [*unresolvable.values(), *failed.values()]:
        counts[reason] = counts.get(reason, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:limit]
    return "; ".join(r if r.endswith(")") else f"{r} ({n} node{'s' if n > 1 else ''})"
                     for r, n in top)
