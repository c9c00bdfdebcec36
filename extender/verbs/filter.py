"""filter: which candidate nodes can hold the pod's GPUs now (vectorised fit).

When more than one node passes, the per-node costs are computed once here and kept briefly
for the prioritize call that follows in the same scheduling cycle.

With ``Scheduler.filter_best_within`` set (the scheduler config then has no prioritizeVerb:
one round trip per pod), filter scores the fitting nodes as prioritize would and answers only
those within that many score points (0-10) of the best; kube-scheduler's own scores choose
among them. Nodes left out for scoring lower are not reported as failed: they fit. With
``Scheduler.filter_best_single`` too, filter answers the one node of lowest cost (the first in
the request's order among equals): kube-scheduler, left with one feasible node, then skips
its own scoring altogether.

With ``--locality-max-wait``, an embedding reader that could start now may be answered with no
node while a node whose cache holds its tables is predicted to have room soon enough to pay
(``verbs.localitywait``: delay scheduling).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import numpy as np

from extender import protocol, stages
from extender.demand import wants_gpu
from extender.errors import InvalidDemand
from extender.outcome import Outcome
from extender.placement import fit, node_costs, scores_from_costs
from extender.placement.assign import note_unplaced
from extender.placement.locality import parse_embedding
from extender.protocol import ExtenderArgs, FilterResult
from extender.verbs import gang, holdfilter, localitywait
from extender.verbs.costcache import CycleEntry
from extender.verbs.prioritize import with_locality
from extender.verbs.reasons import pod_ref, summarize

if TYPE_CHECKING:
    from extender.service import Scheduler


async def run(s: Scheduler, args: ExtenderArgs) -> FilterResult:
    pod = args.pod
    if args.nodes is not None:  # full Nodes: their allocatable CPU and memory (HostBook)
        s.observe_allocatable(args.nodes)
    if args.nodes is not None and s.trust_request_inventory:  # see docs/security.md
        s.update_nodes((n.metadata.name, n.metadata.annotations, n.metadata.labels)
                       for n in args.nodes)
    if not wants_gpu(pod):
        return protocol.filter_result(list(args.node_names), {}, {}, args)
    slotted = await gang.filter_slot(s, pod, args)
    if slotted is not None:  # a gang worker goes to its slot's node
        return slotted
    # When the prediction is fetched from the network, the ledger is read meanwhile; else the
    # view is taken in line (a task would wait its turn behind whatever the loop has queued).
    early = asyncio.ensure_future(s.view()) if s.reads_prediction(pod) else None
    try:
        demand = await s.demand_of(pod)
        embedding = parse_embedding(pod.metadata.annotations)
    except BaseException as exc:
        if early is not None:
            early.cancel()
            with contextlib.suppress(BaseException):
                await early
        if not isinstance(exc, InvalidDemand):
            raise
        reason = f"invalid GPU request: {exc}"
        s.notify(Outcome("filter", *pod_ref(pod), False, reason))
        return protocol.filter_result([], {}, {n: reason for n in args.node_names}, args)
    with stages.stage("ledger"):  # only what is left to wait for
        view = await (early if early is not None else s.view())
    state = s.own_excluded(view, demand.uid)
    # Per shape and node, kept while the node is not booked (None: not served there).
    verdicts = s.node_verdicts.fits(s.policy, state, demand, args.node_names)
    result = fit(state, demand, args.node_names) if verdicts is None else verdicts
    fitting = np.flatnonzero(result.fits)
    names = result.names
    if embedding is not None and embedding.required:  # opt-in: only the store's racks
        misses = s.locality.required_misses(embedding, [names[i] for i in fitting.tolist()])
        result.failed.update(misses)
        fitting = np.array([i for i in fitting.tolist() if names[i] not in misses],
                           dtype=np.int64)
    # Python ints: indexing with NumPy's is slow; all fit: the request's own list
    passed = (names if len(fitting) == len(names)
              else [names[i] for i in fitting.tolist()])
    failed = result.failed
    if passed and s.holds.hold is not None:  # a node held for a waiting gang
        before, failed = len(passed), dict(failed)  # (a cached verdict's dict stays as is)
        passed = holdfilter.held_off(s, state, demand, passed, failed)
        if len(passed) < before:
            kept = set(passed)
            fitting = np.array([i for i in fitting.tolist() if names[i] in kept],
                               dtype=np.int64)
    costs = None
    if len(passed) > 1:  # prioritize follows in the same cycle: cost the nodes once
        costs = (node_costs(state, demand, result, s.costing_policy)[fitting]
                 if verdicts is None
                 else s.node_verdicts.costs(s.policy, state, demand, verdicts, fitting))
    if embedding is not None and s.locality.weights.max_wait_s > 0:
        def here() -> str:  # the node the pod would take now
            if costs is None:
                return passed[0]
            return passed[int(np.argmin(with_locality(s, pod, demand, passed, costs)))]

        wait = localitywait.warm_node_wait(s, state, demand, embedding, args.node_names,
                                           passed, here, pod.metadata.creationTimestamp)
        s.reader_waits.waits(demand.uid, demand.key, wait, s.clock())
        if wait is not None:  # unresolvable: no preemption for a pod that chose to wait
            reason = wait.reason()
            s.locality_waits += 1
            s.notify(Outcome("wait", *pod_ref(pod), False, wait.event()))
            return protocol.filter_result([], {}, {n: reason for n in args.node_names}, args)
    if not passed:
        holdfilter.hold_for(s, state, demand, list(args.node_names))
        note_unplaced(s.costing_policy, demand)  # as node_costs does where nothing fits
        why = summarize(failed, result.unresolvable)
        s.notify(Outcome("filter", *pod_ref(pod), False, why))
    elif costs is not None:
        if s.filter_best_within is not None:  # no prioritize follows: answer the best
            total = with_locality(s, pod, demand, passed, costs)
            passed = ([passed[int(np.argmin(total))]] if s.filter_best_single
                      else best_nodes(passed, scores_from_costs(total), s.filter_best_within))
        else:
            every = len(fitting) == len(names)  # all passed: the candidates themselves
            s.cycle_costs.put(demand.uid, s.clock(), CycleEntry.of(
                state, passed, result.nodes if every else result.nodes[fitting], costs,
                names, fitting,
                verdicts.current(state) if every and verdicts is not None else None))
    return protocol.filter_result(passed, failed, result.unresolvable, args)


def best_nodes(names: list[str], scores: list[int], within: float) -> list[str]:
    """The names scoring at least the best score less ``within``, in the request's order."""
    floor = max(scores) - within
    return [n for n, score in zip(names, scores, strict=True) if score >= floor]
