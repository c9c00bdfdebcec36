"""Experiment ``locality``: recommendation jobs reading embeddings over a rack/zone network, with
and without the extender's locality term (``extender.placement.locality``), same trace, same seed.

Model (figures in ``bench/data/locality/topology.yaml``):

* Cluster: zones x racks x nodes of ``gpus_per_node`` GPUs; node names are a seeded shuffle, so
  the sparse policy's fixed node order says nothing about racks. The store's shards run on
  ``store.shards_per_rack`` nodes of each rack the file names, one per node; the locality
  index learns them as the extender does (the shards' nodes).
* Jobs: GPU pods sampled from an openb pod list (shapes and durations, as ``replay``), arriving
  in trace order compressed to offered load ``load``. With probability ``rec_share`` a job is a
  recommendation job reading 1..3 tables picked by Zipf popularity, declaring them (with
  ``hotRows`` = ``hot_share`` of each table) as the ``sparse.io/embedding`` annotation does.
* Step time = compute x interference slowdown + embedding fetch. Compute: the trace duration is
  the job's solo compute time in steps of ``step_compute_s``; the slowdown is ``replay``'s
  (product of norm(a|b)^(milli_b/1000) over GPU co-runners). Fetch per step and table: one
  request round trip; the rows found in the node cache at ``local`` speed, the rest at the
  speed of the path to each shard (same rack, same zone, or across zones): a table's blocks
  are spread over all shards, so every shard serves its part of every job's misses.
* Node caches over time (``NodeCaches``, ``extender.placement.cache_warmup``): capacity
  ``gib_per_node``, split over the tables the running jobs read as LFU splits it (their room);
  a table nobody on the node read is empty and fills on miss as its readers step (after ``E``
  of its ids, row ``k`` is held with probability ``1 - exp(-E p_k)``, up to its room; misses
  cost network time, so the fill is bounded by the links); a table whose readers left keeps
  its rows until the tables in use fill the room, the longest idle first. A job's hit ratio is
  its mean over its steps left as its tables fill, set when it starts and whenever a job
  starts or ends on its node. The cache's content is published through the same
  ``encode_cache`` annotation the DaemonSet writes (rows held now, readers per table), read by
  the same ``LocalityIndex``. Jobs declare ``idsPerStep`` (the ids behind the step's distinct
  rows), ``steps`` (their length) and ``stepComputeMs`` (a step's solo compute), so the term
  scores each node by the step time it saves (``extender.placement.step_time``, priced with
  this topology's ``network``).
* Misses share the store's shards, the racks' uplinks and the zones' interconnects
  (``bench/sim/embed_net.py``, capacities under ``links`` in the topology file): whenever a
  recommendation job starts or ends, the links are re-spread over the running ones and their
  fetch times move.
* Hit ratios count the rows a step *fetches*: a batch's ids are deduplicated, so a hot row
  drawn many times is fetched once, and the cached top ``c`` rows serve a smaller share of the
  fetched rows than of the draws (``fetched_hit``).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import fields, replace

import numpy as np

from bench.sim.cluster import SimCluster
from bench.sim.embed_net import GBPS, StoreNetwork
from bench.sim.fgd import typical_tasks
from bench.sim.locality_caches import (  # noqa: F401  (re-exported: the replay's parts)
    KEY_OVERHEAD_BYTES,
    NodeCaches,
    fetched_hit,
    step_rows,
    zipf_mass,
)
from bench.sim.locality_result import LocalityRun, RunRecord, run_result
from bench.sim.locality_topology import TOPOLOGY, Topology  # noqa: F401  (re-exported)
from bench.sim.queueing import arrival_times, co_location_slowdown, placement_policy
from bench.sim.replay import sample_jobs
from bench.sim.trace import load_pods, workload_name, workload_path
from embed.publisher import CachePublisher, Snapshot, changed
from extender.interference.matrix import default_matrix
from extender.placement.delay import free_in, freed_node_order, room_in, warm_wait
from extender.placement.locality import EmbeddingSpec, LocalityIndex, LocalityWeights
from extender.placement.step_time import NetworkModel
from extender.queueorder import PREDICTION_MARGIN, latest_start_due

# The cache DaemonSet's pacing (``CachePublisher``'s defaults): at most one publication per
# min_interval_s, when the rows moved by more than min_change or the readers changed, and one
# at least every max_interval_s.
PACING = {f.name: f.default for f in fields(CachePublisher)
          if f.name in ("min_interval_s", "max_interval_s", "min_change")}


def _job_tables(rng: np.random.Generator, n_tables: int, alpha: float, lo: int, hi: int
                ) -> tuple[str, ...]:
    weights = np.arange(1, n_tables + 1, dtype=np.float64) ** -alpha
    k = int(rng.integers(lo, hi + 1))
    picked = rng.choice(n_tables, size=min(k, n_tables), replace=False, p=weights / weights.sum())
    return tuple(f"table-{int(i):02d}" for i in sorted(picked))


def grouped_tables(tables: list[tuple[str, ...]], created: np.ndarray, readers: int,
                   rows: dict[str, int]) -> list[tuple[str, ...]]:
    """The readers of ``tables`` regrouped: in arrival order, every ``readers`` consecutive
    readers read the tables the first of them drew, as copies of their own (``rows`` gains
    them, same sizes), so no other group shares them."""
    if readers < 1:
        raise ValueError("readers_per_table must be at least 1")
    out = list(tables)
    order = [j for j in np.argsort(created, kind="stable").tolist() if tables[j]]
    for g in range(0, len(order), readers):
        first = tables[order[g]]
        copies = tuple(f"g{g // readers:03d}-{t}" for t in first)
        for t, c in zip(first, copies, strict=True):
            rows[c] = rows[t]
        for j in order[g:g + readers]:
            out[j] = copies
    return out


def run_locality(workload: str = "default", seed: int = 42, *, locality: bool = True,
                 scenario: str = "recommendation", n_jobs: int = 400, rec_share: float = 0.7,
                 load: float = 0.9, topology: str | None = None, policy: str = "sparse",
                 weights: LocalityWeights | None = None, mode: str = "continuous",
                 overrides: dict | None = None, length_scale: float = 1.0,
                 readers_per_table: int | None = None, delay: bool = False,
                 oracle: str | None = None, shadow: str | None = None) -> LocalityRun:
    """``scenario``: ``recommendation`` (``rec_share`` of jobs read embeddings) or
    ``no-embeddings`` (none do; the caches start warm on a third of the nodes). ``mode``:
    ``continuous`` (trace arrival order at offered load ``load``) or ``high-load`` (every job
    submitted at t = 0: queueing dominates, as in ``replay``). ``overrides``: topology values
    by dotted key (``Topology.load``). ``length_scale``: every job's length (its steps) times
    this; the arrivals keep the offered load. ``readers_per_table``: the recommendation jobs,
    in arrival order, come in groups of this many that read the same tables (a
    hyper-parameter sweep's trials, or one model retrained), each group its own copies of the
    tables it draws (same sizes, same draws), so every table has this many readers; None: the
    file's tables, shared by popularity. ``delay``: with the term, delay scheduling too
    (``extender.placement.delay``): a freed node goes first to the queued jobs its cache
    serves, and a job may wait for a warm node predicted to free sooner than the run time it
    saves; jobs whose latest start has come (``queueorder.latest_start_due``) go first and
    never wait. ``oracle`` (not a score; what placement could win at all under this
    physics): ``greedy``: each recommendation job goes, among the nodes that fit, to the one
    where it and the readers already running have the least run time left, priced by the
    replay itself (its caches' room split and fill, the shared links' stretch);
    ``greedy-rows``: the same, to the fewest rows they will miss (what a saturated store's
    egress serves); ``ideal``:
    wherever it runs, every reader fetches as if alone with its tables on a warm node in the
    store's rack (``NodeCaches.alone_hit``; its misses cross the store's shards only, no NIC
    or uplink), a bound no placement can beat; ``ideal-hit`` / ``ideal-path``: only the
    hit ratio / only the path so (which of the two bounds it); the queue and the fit as the
    policy's. ``shadow`` (``greedy`` or ``greedy-rows``, with the term): that oracle is asked
    at every choice of node and not followed; the run reports how often the term's node was
    the oracle's (``oracle_agreement``)."""
    if shadow not in (None, "greedy", "greedy-rows") or (shadow and (oracle or not locality)):
        raise ValueError(f"shadow must be greedy or greedy-rows, with the term and no oracle, "
                         f"not {shadow!r}")
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    topo = Topology.load(topology, seed, overrides)
    cfg_t, cfg_j, net = topo.raw["tables"], topo.raw["jobs"], topo.raw["network"]
    matrix = default_matrix()
    jobs = sample_jobs(load_pods(workload_path(workload)), n_jobs, rng)
    if length_scale != 1.0:
        jobs = jobs.assign(duration=jobs["duration"] * float(length_scale))
    n_tables = int(cfg_t["count"])
    rows = {f"table-{i:02d}": int(np.exp(rng.uniform(np.log(cfg_t["rows_min"]),
                                                     np.log(cfg_t["rows_max"]))))
            for i in range(n_tables)}
    row_bytes = int(cfg_t["dim"]) * int(cfg_t["bytes_per_value"])
    others = [c for c in matrix.classes if c not in ("recommendation", "unknown")]
    is_rec = rng.random(len(jobs)) < rec_share
    classes = np.where(is_rec, "recommendation", rng.choice(others, len(jobs)))
    tables = [_job_tables(rng, n_tables, cfg_t["popularity_alpha"], cfg_j["tables_min"],
                          cfg_j["tables_max"]) if rec and scenario == "recommendation" else ()
              for rec in is_rec]
    if readers_per_table is not None:
        tables = grouped_tables(tables, jobs["creation_time"].to_numpy(), readers_per_table,
                                rows)
    unique = float(cfg_j["unique_rows_per_table_step"])
    # Jobs declare their steps too (a training run's step count is set before it starts).
    n_steps = np.maximum(jobs["duration"].to_numpy(dtype=np.float64)
                         / float(cfg_j["step_compute_s"]), 1.0)
    specs = [EmbeddingSpec(topo.raw["store"]["name"], ts,
                           {t: max(1, int(rows[t] * cfg_t["hot_share"])) for t in ts},
                           ids_per_step={t: int(step_rows(float(rows[t]), cfg_t["id_alpha"],
                                                          unique)[0]) for t in ts},
                           steps=int(k), step_compute_ms=float(cfg_j["step_compute_s"]) * 1e3)
             if ts else None for ts, k in zip(tables, n_steps, strict=True)]

    pol = placement_policy(policy, None, typical_tasks(jobs))
    sim = SimCluster(topo.frame(), topo.names, pol, matrix)
    caches = NodeCaches(topo, rows, row_bytes, float(cfg_t["id_alpha"]),
                        {t: step_rows(float(n), cfg_t["id_alpha"], unique)[0]
                         for t, n in rows.items()})
    # The term prices a node's saving with the network the replay runs on: the tiers, and
    # the store's egress its readers share (its shards' serving rate, unless unlimited).
    shard_gbps = float(topo.raw.get("links", {}).get("shard_gbps", 0.0))
    index = LocalityIndex(replace(weights or LocalityWeights(), network=replace(
        NetworkModel.from_dict(net), store_gbps=shard_gbps * len(topo.shards()))))
    index.set_store(topo.raw["store"]["name"], set(topo.shards()))
    published: dict[str, tuple[float, Snapshot]] = {}  # per node: when, and what

    def publish(node: str, at: float, content: Snapshot | None = None) -> None:
        """The node's cache publishes ``content`` (else what it holds) at ``at``."""
        content = caches.content(node) if content is None else content
        index.observe_node(node, caches.annotation(node, at, content), topo.labels(node))
        published[node] = (at, content)

    for n in topo.names:  # every node's cache (a DaemonSet) publishes itself, empty
        publish(n, 0.0)
    if scenario == "no-embeddings":  # leftovers of earlier recommendation jobs
        for n in rng.choice(topo.names, len(topo.names) // 3, replace=False).tolist():
            caches.warm(n, tuple(rng.choice(sorted(rows), 2, replace=False).tolist()))
            publish(n, 0.0)
    sim.locality = index if locality else None

    step = float(cfg_j["step_compute_s"])
    work = jobs["duration"].to_numpy(dtype=np.float64)
    steps = np.maximum(work / step, 1.0)
    request = (jobs["num_gpu"] * jobs["gpu_milli"]).to_numpy() / 1000.0
    n_gpus = sim.total_milli // 1000
    arrive = arrival_times(mode, jobs["creation_time"].to_numpy(dtype=np.float64),
                           float((work * request).sum()), n_gpus, load)
    shapes = [(int(a), int(b), int(c), int(d), e) for a, b, c, d, e in zip(
        jobs["num_gpu"], jobs["gpu_milli"], jobs["cpu_milli"], jobs["memory_mib"],
        jobs["gpu_spec"], strict=True)]
    cls_idx = np.array([matrix.index(c) for c in classes])
    norm = matrix.norm

    def fetch_parts(j: int, node: str, left: float) -> tuple[float, float, float]:
        """Per step on ``node``, means over the job's ``left`` steps (its tables filling the
        node's cache meanwhile, ``NodeCaches.mean_hit``): seconds not spent on missed bytes
        (latencies, hits at local speed), missed bytes, and their seconds on an idle network.
        A table's blocks are spread over all the store's shards, so each shard sends its share
        of the misses over its own path (the node's tier bandwidth to that shard); the step
        waits for the farthest shard's latency."""
        tiers = [net[t] for t in topo.shard_tiers(topo.shards()[0] if ideal_path else node)]
        latency = max(t["latency_ms"] for t in tiers) / 1e3
        per_byte = sum(1.0 / (t["gbps"] * GBPS) for t in tiers) / len(tiers)
        free = miss = 0.0
        for t in tables[j]:
            h = ceiling[j][t] if ideal_hit else caches.mean_hit(node, t, left)
            bytes_ = unique * row_bytes
            free += (net["local"]["latency_ms"] / 1e3 + h * bytes_ / (net["local"]["gbps"] * GBPS)
                     + (latency if h < 1 else 0.0))
            miss += (1 - h) * bytes_
        return free, miss, miss * per_byte

    ceiling = [caches.alone_hit(ts) if ts else {} for ts in tables]
    ideal_hit = oracle in ("ideal", "ideal-hit")
    ideal_path = oracle in ("ideal", "ideal-path")
    remaining = steps.copy()
    rate = np.zeros(len(jobs))
    slow = np.ones(len(jobs))
    fetch = np.zeros(len(jobs))
    fetch_free = np.zeros(len(jobs))  # per step: latencies and hits
    miss_bytes = np.zeros(len(jobs))
    miss_s = np.zeros(len(jobs))  # per step, on an idle network
    fetched = np.zeros(len(jobs))  # seconds spent fetching so far
    used_fetch = np.zeros(len(jobs))  # the fetch time the current rate was set with
    missed = np.zeros(len(jobs))  # bytes missed so far
    used_miss = np.zeros(len(jobs))  # the miss bytes per step the current rate was set with
    step_bytes = np.array([len(ts) * float(cfg_j["unique_rows_per_table_step"]) * row_bytes
                           for ts in tables])
    paths: dict[int, list[int]] = {}  # running recommendation jobs: links their misses cross
    links = StoreNetwork(topo.raw, topo.zone, topo.rack, topo.shards())
    busiest = [0.0, 0.0]  # time-weighted max link stretch, time
    saturated = np.zeros(len(links.names))  # per link: time it ran at capacity
    last = np.zeros(len(jobs))
    version = np.zeros(len(jobs), dtype=np.int64)
    started = np.full(len(jobs), np.nan)
    done = np.full(len(jobs), np.nan)
    node_of: dict[int, str] = {}
    gpu_jobs: dict[int, set[int]] = {}
    job_gpu: dict[int, int] = {}
    cache_hit = np.zeros(len(jobs), dtype=bool)
    in_rack = np.zeros(len(jobs), dtype=bool)  # any job, in a rack of the store's shards
    choice = np.zeros(len(jobs), dtype=bool)  # placed with more than one node to choose from
    events: list[tuple[float, int, int, int]] = [(float(arrive[j]), 1, j, 0)
                                                 for j in range(len(jobs))]
    heapq.heapify(events)
    pending: list[int] = []
    now = 0.0

    def set_rate(j: int) -> None:
        done_steps = (now - last[j]) * rate[j]
        remaining[j] -= done_steps
        fetched[j] += done_steps * used_fetch[j]
        missed[j] += done_steps * used_miss[j]
        used_fetch[j] = fetch[j]
        used_miss[j] = miss_bytes[j]
        last[j] = now
        rate[j] = 1.0 / (step / slow[j] + fetch[j])
        version[j] += 1
        heapq.heappush(events, (now + max(remaining[j], 0.0) / rate[j], 0, j, int(version[j])))

    def refresh(g: int) -> None:
        members = gpu_jobs.get(g, ())
        for j in members:
            s = co_location_slowdown(j, members, norm, cls_idx, shapes)
            if s != slow[j] or rate[j] == 0:
                slow[j] = s
                set_rate(j)

    def share_links() -> None:
        """Re-spread the links over the running recommendation jobs; re-rate those whose
        fetch time moved."""
        if busiest[1] < now:
            busiest[0] += float(links.kappa.max()) * (now - busiest[1])
            saturated[:] += (links.kappa > 1.01) * (now - busiest[1])
            busiest[1] = now
        run = sorted(paths)
        if not run:
            return
        idx = np.array(run)
        f = links.stretch([paths[j] for j in run], miss_bytes[idx],
                          step / slow[idx] + fetch_free[idx], miss_s[idx])
        for j, fj in zip(run, f.tolist(), strict=True):
            new = fetch_free[j] + miss_s[j] * fj
            if abs(new - fetch[j]) > 1e-3 * fetch[j] or rate[j] == 0:
                fetch[j] = new
                set_rate(j)

    on_node: dict[str, set[int]] = {n: set() for n in topo.names}  # running readers
    read_mark = np.zeros(len(jobs))  # steps of each job already read into its node's cache
    cold = np.zeros(len(jobs))  # at its start: hit ratio lost to its caches' filling

    def feed_cache(node: str) -> None:
        """The readers on ``node`` stepped since the last event there: their ids went through
        its cache (misses filled it)."""
        ids: dict[str, float] = {}
        for k in on_node[node]:
            done_steps = steps[k] - remaining[k] + (now - last[k]) * rate[k]
            d = max(done_steps - read_mark[k], 0.0)
            read_mark[k] += d
            for t in tables[k]:
                ids[t] = ids.get(t, 0.0) + d * caches.draws[t]
        caches.read(node, ids)

    def rerate_readers(node: str, skip: int = -1) -> None:
        """Running readers on ``node``: their hit ratio over their steps left, from what the
        cache holds now and the room their tables have there."""
        for k in on_node[node]:
            if k != skip:
                left = max(remaining[k] - (now - last[k]) * rate[k], 1.0)
                fetch_free[k], miss_bytes[k], miss_s[k] = fetch_parts(k, node, left)

    def content_now(node: str) -> Snapshot:
        """What the node's cache holds now, its readers' reads since the last event there
        counted (a what-if: the cache and the readers' marks are left as they were)."""
        kept, marks = caches.snapshot(node), {k: read_mark[k] for k in on_node[node]}
        feed_cache(node)
        content = caches.content(node)
        caches.restore(node, kept)
        for k, mark in marks.items():
            read_mark[k] = mark
        return content

    def publish_due() -> None:
        """As each node's cache publisher does between its jobs' starts and ends: the rows
        its readers' misses filled since, once its pacing lets it."""
        for node in topo.names:
            at, last_content = published[node]
            if now - at < PACING["min_interval_s"]:
                continue
            content = content_now(node)
            if (changed(last_content, content, PACING["min_change"])
                    or now - at >= PACING["max_interval_s"]):
                publish(node, now, content)

    max_wait = float(weights.max_wait_s) if weights is not None else 0.0
    delay_on = bool((delay or max_wait > 0) and locality)
    first_try = np.full(len(jobs), np.nan)  # a job's first chance to start
    delayed = np.zeros(len(jobs), dtype=bool)  # waited for a warm node at least once
    due = np.zeros(len(jobs), dtype=bool)
    running_on: dict[str, set[int]] = {n: set() for n in topo.names}  # every running job
    ref_run = np.array([index.reference_run_seconds(s) or np.nan if s else np.nan
                        for s in specs])  # the term's reference run time (rowBytes unknown
    # before the first cache publishes: filled in when first needed)
    st = sim.state

    def free_gpus(node: str) -> float:
        i = st.node_index[node]
        at = slice(int(st.node_start[i]), int(st.node_stop[i]))
        return float((st.milli_cap[at] - st.milli_used[at]).sum()) / 1000.0

    def predicted_end(k: int) -> float:
        """When running job ``k`` ends at the rate it runs now."""
        return last[k] + max(remaining[k], 0.0) / rate[k] if rate[k] > 0 else np.inf

    def waits(j: int, d) -> bool:
        """Delay scheduling: whether job ``j`` waits for a warm node (``warm_wait``)."""
        spec = specs[j]
        if not delay_on or spec is None or due[j]:
            return False
        waited = now - first_try[j]
        if max_wait > 0 and waited >= max_wait:  # the extender's bound, from the first try
            return False
        if np.isnan(ref_run[j]):
            ref_run[j] = index.reference_run_seconds(spec) or np.nan
        warm = index.warm_nodes(spec.tables) if np.isfinite(ref_run[j]) else []
        near: dict[str, float] = {}  # warm nodes without room now, predicted to free in time
        if not delay:  # the extender's wait (verbs/localitywait.py): shares, on candidates
            if d.whole_gpus:  # (kube-scheduler drops a full node for whole GPUs itself)
                return False
            asked = {sim.names[i] for i in sim.candidates(d).tolist()}
        for w in warm:
            ks = sorted(running_on[w])
            if delay:
                fin = free_in(now, free_gpus(w), float(request[j]),
                              [predicted_end(k) for k in ks], [float(request[k]) for k in ks])
            elif w in asked:  # a GPU of the node free, its pods' ends as the extender's
                fin = room_in(st, st.node_index[w], d, now,
                              {f"job-{k}": predicted_end(k) for k in ks})
                fin = fin if waited + fin <= max_wait else np.inf
            else:
                continue
            # room there now but not chosen: the policy's costs outweigh it; waiting won't help
            if fin > 0 and waited + fin < ref_run[j]:  # the saving is below the run time
                near[w] = fin
        if not near:
            return False
        wait = warm_wait(lambda names: index.bonus(spec, names), sim.best_node(d, now, spec),
                         near, waited, bool(due[j]), float(ref_run[j]))
        delayed[j] |= wait is not None
        return wait is not None

    def update_due() -> None:
        """Latest-start due jobs (``queueorder.latest_start_due``), run times predicted as
        the term's reference run (readers) or the solo compute (the rest)."""
        predicted = np.where(np.isfinite(ref_run), ref_run, work)
        due[:] = latest_start_due(now, float(n_gpus), arrive, predicted, PREDICTION_MARGIN,
                                  predicted, request, started, done)

    trying = [-1]  # the job try_start places (the oracle prices it)
    judge = oracle or shadow  # the oracle that prices the choices (followed or not)
    mix: list[int] = []  # per reader's start: tables in use on its node then

    def per_step(ks: list[int], parts: dict[int, tuple[float, float, float]], path: list
                 ) -> np.ndarray:
        """Step seconds of the running readers ``ks`` when ``parts`` replace their fetch
        parts, under the links' stretch with those bytes (the links' state is kept)."""
        free = np.array([parts[k][0] if k in parts else fetch_free[k] for k in ks])
        miss = np.array([parts[k][1] if k in parts else miss_bytes[k] for k in ks])
        ms = np.array([parts[k][2] if k in parts else miss_s[k] for k in ks])
        comp = np.array([step / slow[k] if k in paths else step for k in ks])
        kappa = links.kappa.copy()
        f = links.stretch(path, miss, comp + free, ms)
        links.kappa = kappa
        return comp + free + ms * f

    def oracle_costs(names: list[str], costs: np.ndarray, spec: EmbeddingSpec) -> np.ndarray:
        j = trying[0]
        ok = np.flatnonzero(np.isfinite(costs))
        if len(ok) < 2:
            return costs
        run = sorted(paths)
        left = np.array([max(remaining[k] - (now - last[k]) * rate[k], 1.0) for k in run]
                        + [steps[j]])
        best, best_i = np.inf, -1
        for i in ok[np.argsort(costs[ok], kind="stable")].tolist():  # ties: the policy's pick
            node = names[i]
            feed_cache(node)
            readers = [k for k in run if node_of[k] == node]
            before = {k: fetch_parts(k, node, left[run.index(k)]) for k in readers}
            snap = caches.snapshot(node)
            caches.start(node, tables[j])
            parts = {k: fetch_parts(k, node, left[run.index(k)]) for k in readers}
            parts[j] = fetch_parts(j, node, steps[j])
            caches.restore(node, snap)
            ks = [*run, j]
            if judge == "greedy-rows":  # the bytes they will miss, whatever the links
                total = sum(left[run.index(k)] * (parts[k][1] - before[k][1]) for k in readers)
                total += steps[j] * parts[j][1]
            else:
                with_j = per_step(ks, parts, [*(paths[k] for k in run), links.path(node)])
                total = float(left @ with_j)
            if readers and judge != "greedy-rows":  # the readers there: their own fill
                # since they last re-rated, not the job's doing
                total -= float(left[:-1] @ (per_step(run, before, [paths[k] for k in run])
                                            - per_step(run, {}, [paths[k] for k in run])))
            if best_i < 0 or total < best - 1e-9 * abs(best):
                best, best_i = total, i
        out = costs.copy()  # the others stay finite: the choice is still counted
        out[best_i] = float(costs[ok].min()) - 1e9
        return out

    if oracle not in (None, "greedy", "greedy-rows", "ideal", "ideal-hit", "ideal-path"):
        raise ValueError("oracle must be greedy, greedy-rows, ideal, ideal-hit or ideal-path, "
                         f"not {oracle!r}")
    if oracle in ("greedy", "greedy-rows"):
        sim.reader_costs = oracle_costs
    agreed = [0, 0]  # choices where the term's node was the shadow oracle's; choices

    def shadowed_costs(names: list[str], costs: np.ndarray, spec: EmbeddingSpec
                       ) -> np.ndarray:
        """The policy's and the term's costs as they are; the oracle's pick counted."""
        if np.isfinite(costs).sum() >= 2:
            agreed[0] += int(sim.pick(oracle_costs(names, costs, spec)) == sim.pick(costs))
            agreed[1] += 1
        return costs

    if shadow is not None:
        sim.reader_costs = shadowed_costs
    shard_only = {i: 1.0 / len(links.shards) for i in range(len(links.shards))}

    def try_start(j: int) -> bool:
        trying[0] = j
        num, milli, cpu, mem, spec = shapes[j]
        d = sim.demand(f"job-{j}", cpu, mem, num, milli, spec, job_class=str(classes[j]))
        if np.isnan(first_try[j]):
            first_try[j] = now
        if waits(j, d):
            return False
        before = sim.with_choice
        placed = sim.schedule(d, now, embedding=specs[j])
        if placed is None:
            return False
        choice[j] = sim.with_choice > before
        node = str(sim.names[placed.node])
        node_of[j] = node
        running_on[node].add(j)
        in_rack[j] = topo.tier(node) == "rack"
        started[j] = last[j] = now
        if tables[j]:
            feed_cache(node)
            cache_hit[j] = all(caches.rows_of(node, t) >= 1 for t in tables[j])
            caches.start(node, tables[j])
            mix.append(len(caches.active[node]))
            on_node[node].add(j)
            fetch_free[j], miss_bytes[j], miss_s[j] = fetch_parts(j, node, steps[j])
            fetch[j] = fetch_free[j] + miss_s[j]
            cold[j] = np.mean([caches.warm_hit(node, t) - caches.mean_hit(node, t, steps[j])
                               for t in tables[j]])
            rerate_readers(node, skip=j)
            paths[j] = shard_only if ideal_path else links.path(node)
            publish(node, now)
        if d.has_share:
            g = sim.state.gpu_index[placed.reservation.allocations[0].gpu]
            gpu_jobs.setdefault(g, set()).add(j)
            job_gpu[j] = g
            refresh(g)
        else:
            set_rate(j)
        if tables[j]:
            share_links()
        return True

    while events:
        t, kind, j, ver = heapq.heappop(events)
        if kind == 0 and (ver != version[j] or not np.isnan(done[j])):
            continue
        now = t
        if locality:  # (the index is read only with the term)
            publish_due()
        if kind == 1:
            if not try_start(j):
                pending.append(j)
            continue
        done[j] = now
        set_rate(j)  # books the last stretch's fetch time
        sim.release(f"job-{j}")
        running_on[node_of[j]].discard(j)
        if tables[j]:
            paths.pop(j, None)
            feed_cache(node_of[j])
            on_node[node_of[j]].discard(j)
            caches.stop(node_of[j], tables[j])
            rerate_readers(node_of[j])
            publish(node_of[j], now)
            share_links()
        g = job_gpu.pop(j, None)
        if g is not None:
            gpu_jobs[g].discard(j)
            refresh(g)
        if delay and delay_on and pending:  # the freed node goes first to the jobs its
            # cache serves (the replay's own delay scheduling; the extender only waits)
            update_due()
            order = freed_node_order([index.tables_held(tables[k], node_of[j]) for k in pending],
                                     due[pending].tolist())
            left = {k for k in [pending[i] for i in order] if not try_start(k)}
            pending[:] = [k for k in pending if k in left]
        else:
            pending[:] = [k for k in pending if not try_start(k)]

    result = run_result(RunRecord(
        workload=workload_name(workload), scenario=scenario, mode=mode, locality=locality,
        seed=seed, gpus=n_gpus, arrive=arrive, started=started, done=done, request=request,
        reads=np.array([bool(t) for t in tables]), steps=steps, step_bytes=step_bytes,
        fetched=fetched, missed=missed, cold=cold, cache_hit=cache_hit, in_rack=in_rack,
        choice=choice,
        link_stretch=busiest[0] / max(busiest[1], 1e-9) if busiest[1] else 1.0, t0=t0))
    reads = np.array([bool(t) for t in tables])
    result.delayed = float(delayed[reads].mean()) if reads.any() else float("nan")
    w = (step_bytes * steps)[reads]
    result.hit_ceiling = float(np.average([np.mean(list(ceiling[j].values()))
                                           for j in np.flatnonzero(reads)], weights=w)) \
        if reads.any() else float("nan")
    result.tables_on_node = float(np.mean(mix)) if mix else float("nan")
    if agreed[1]:
        result.oracle_agreement = agreed[0] / agreed[1]
    result.saturated = links.saturated_by_kind(saturated / max(result.makespan, 1e-9),
                                               topo.shards())
    return result
