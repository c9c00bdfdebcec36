"""rec-mix workload and replay: mix parsing, demands, OOM accounting, physics, CLI."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.sim.physics import shared_speeds
from bench.sim.recmix import GPU_MEM_MIB, build_jobs, measured_profiles, parse_mix
from bench.sim.recmix_replay import booked, run_recmix, split_policy

FAMILIES = {"dlrm": "recommendation", "deepfm": "recommendation", "bert": "transformer",
            "resnet": "cnn"}


def test_mix_rec_share_spreads_over_recommendation_families():
    mix = parse_mix("rec=0.8", FAMILIES)
    assert mix["dlrm"] == pytest.approx(0.4) and mix["deepfm"] == pytest.approx(0.4)
    assert mix["bert"] == pytest.approx(0.1) and sum(mix.values()) == pytest.approx(1.0)


def test_mix_explicit_weights_and_errors():
    assert parse_mix("dlrm=3,bert=1", FAMILIES) == {"bert": 0.25, "dlrm": 0.75}
    with pytest.raises(ValueError, match="unknown family"):
        parse_mix("gpt=1", FAMILIES)
    with pytest.raises(ValueError, match="weight 0"):
        parse_mix("dlrm=0", FAMILIES)


def test_families_come_from_the_measured_data():
    prof = measured_profiles()
    assert {"recommendation"} <= set(prof["job_class"])
    assert (prof["sm"] <= prof["util"]).all() and (prof["mem_real_mib"] > 0).all()


def test_jobs_follow_the_mix_and_declare_padded_memory():
    jobs = build_jobs(400, np.random.default_rng(0), mix="rec=1.0", pad=2.0, pad_spread=0.0).jobs
    assert set(jobs["job_class"]) == {"recommendation"}
    assert (jobs["declared_mem_mib"] % 1024 == 0).all()
    assert (jobs["declared_mem_mib"] >= 2 * jobs["mem_real_mib"]).all()
    assert (jobs["declared_milli"] < 1000).all()  # recommendation jobs draw sharing pods


def test_what_each_policy_books():
    jobs = build_jobs(50, np.random.default_rng(1)).jobs
    milli, mem = booked(jobs, "kube-exclusive", None)
    assert (milli == 0).all() and (mem == GPU_MEM_MIB).all()
    milli, mem = booked(jobs, "sparse", None)  # the extender's rule: max memory, predicted milli
    assert (milli == jobs["pred_milli"]).all()
    assert (mem == np.maximum(jobs["pred_mem_mib"], jobs["declared_mem_mib"])).all()
    milli, mem = booked(jobs, "kube-shared", None)
    share = jobs["declared_milli"].to_numpy() < 1000
    assert (mem[share] == jobs["declared_mem_mib"].to_numpy()[share]).all()
    assert (milli[share] <= 1000 * mem[share] / GPU_MEM_MIB + 1).all()
    milli, _ = booked(jobs, "fgd", "predicted")
    assert (milli == jobs["pred_milli"]).all()
    with pytest.raises(ValueError):
        split_policy("fgd@guessed")


def test_physics_time_slicing_and_light_pairs():
    assert shared_speeds([1.0, 1.0], [1.0, 1.0], [0, 0]) == pytest.approx([0.5, 0.5])
    light = shared_speeds([0.4, 0.4], [0.15, 0.15], [0.01, 0.01])
    assert light[0] == pytest.approx(1 / (0.6 + 0.4 * 1.15))
    light_next_to_heavy, heavy = shared_speeds([0.4, 1.0], [0.15, 0.8], [0, 0])
    assert light_next_to_heavy < heavy < 1.0
    many = shared_speeds(np.full(12, 0.9), np.full(12, 0.9), np.zeros(12))
    assert np.dot(np.full(12, 0.9), many) <= 1.0 + 1e-9  # SM-time is conserved


def test_under_booked_memory_runs_out_and_is_counted():
    run = run_recmix("kube-shared", 3, n_jobs=80, pad=0.7, pad_spread=0.0, oom_bump=2.0)
    assert run.oom_events > 0
    assert np.isfinite(run.makespan)  # every job eventually finished
    exclusive = run_recmix("kube-exclusive", 3, n_jobs=80, pad=0.7, pad_spread=0.0)
    assert exclusive.oom_events == 0 and np.isnan(exclusive.share_stretch)


def test_cli_rec_mix_report(tmp_path):
    out = tmp_path / "r"
    res = CliRunner().invoke(main, ["replay", "-w", "rec-mix", "--jobs", "60", "-j", "1",
                                    "-p", "kube-exclusive", "-p", "sparse", "--mode",
                                    "high-load", "--explain", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "What bounds the makespan" in res.output and "ahead started" in res.output
    text = (out / "report.md").read_text()
    assert "sm_util_vs_exclusive" in text and "oom_events" in text
    assert "What bounds the makespan" in text
    assert (out / "jct-cdf-high-load.png").exists()
    again = CliRunner().invoke(main, ["report", str(out), "--out", str(tmp_path / "again")])
    assert again.exit_code == 0, again.output
    assert "sm_util_vs_exclusive" in (tmp_path / "again" / "report.md").read_text()
    bad = CliRunner().invoke(main, ["replay", "-w", "rec-mix", "-p", "nope", "--out",
                                    str(tmp_path / "x")])
    assert bad.exit_code != 0 and "unknown policy" in bad.output


def test_explain_bounds_hold_and_tail_is_the_last_to_finish():
    """Every order-free bound is below the makespan; the run's own bound (latest start plus
    solo time) too; the tail lists the job that finished last; SM-seconds delivered are the
    same for a sharing and an exclusive policy when nothing runs out of memory."""
    from bench.sim.recmix_explain import explain_markdown

    runs = [run_recmix(p, 5, n_jobs=60) for p in ("kube-exclusive", "sparse")]
    for run in runs:
        e = run.explain
        assert e["bounds"]["order_free"] == max(v for k, v in e["bounds"].items()
                                                if k != "order_free")
        assert e["bounds"]["order_free"] <= run.makespan + 1e-6
        assert e["last_start_plus_solo"] <= run.makespan + 1e-6
        assert e["tail"][0]["done_s"] == pytest.approx(run.makespan)
        assert e["backlog_end"] <= run.makespan
        assert sum(e["blocked"].values()) == pytest.approx(1.0) or not e["blocked"]
    exclusive, sparse = runs
    assert exclusive.explain["jobs_per_busy_gpu"] == pytest.approx(1.0)
    assert sparse.explain["jobs_per_busy_gpu"] > 1.0
    if exclusive.oom_events == sparse.oom_events == 0:
        assert sparse.explain["sm_seconds"] == pytest.approx(exclusive.explain["sm_seconds"],
                                                             rel=1e-6)
    text = "\n".join(explain_markdown(runs))
    assert "What bounds the makespan" in text and "order_free" in text


def test_longest_first_queue_is_the_same_jobs_reported_as_its_own_mode():
    fifo = run_recmix("kube-exclusive", 5, n_jobs=60)
    lpt = run_recmix("kube-exclusive", 5, n_jobs=60, queue_order="longest-first")
    assert lpt.mode == "high-load-longest-first" and fifo.mode == "high-load"
    assert lpt.explain["bounds"] == pytest.approx(fifo.explain["bounds"])  # same work
    assert lpt.explain["sm_seconds"] == pytest.approx(fifo.explain["sm_seconds"])
    with pytest.raises(ValueError, match="queue order"):
        run_recmix("sparse", 5, n_jobs=10, queue_order="random")


def test_physics_dram_contention_only_above_the_bandwidth():
    """DRAM bandwidth slows the GPU parts only once the jobs together ask for more than the
    GPU has; a job alone is never slowed; the host part of a step never stretches."""
    below = shared_speeds([0.5, 0.5], [0.2, 0.2], [0.4, 0.5])
    assert below[0] == pytest.approx(1 / (0.5 + 0.5 * 1.2))
    above = shared_speeds([0.5, 0.5], [0.2, 0.2], [0.8, 0.7])
    assert above[0] == pytest.approx(1 / (0.5 + 0.5 * 1.2 * 1.5))
    assert shared_speeds([1.0], [1.0], [1.0]) == pytest.approx([1.0])
    host_bound = shared_speeds([0.05, 1.0], [0.05, 1.0], [0, 0])
    assert host_bound[0] > 1 / 1.06  # 95 % of its step is on the host


def test_explain_tail_says_when_the_jobs_ahead_had_started():
    run = run_recmix("kube-exclusive", 5, n_jobs=60)
    for t in run.explain["tail"]:
        # exclusive FIFO on identical GPUs: a job starts only after every job ahead of it
        assert t["head_s"] <= t["start_s"] + 1e-6 and t["overtaken"] >= 0


def test_banded_queue_starts_long_predicted_jobs_first_fifo_within_a_band():
    """Whole GPUs, all jobs at t = 0: a job of a higher band (longer *predicted* duration)
    starts no later than any job of a lower band, even one submitted before it; within a band
    the first submitted starts first. The band comes from the predictor's step time, not the
    true one."""
    from bench.sim.recmix_replay import queue_rank

    detail: dict = {}
    run = run_recmix("kube-exclusive", 5, n_jobs=60, queue_order="bands", detail=detail)
    assert run.mode == "high-load-bands"
    jobs, start = detail["jobs"], detail["first_start"]
    rank = queue_rank(jobs)
    assert len(set(rank)) > 1
    overtaken = 0
    for a in range(len(jobs)):
        for b in range(a + 1, len(jobs)):  # a was submitted before b
            if rank[a] == rank[b]:
                assert start[a] <= start[b]
            elif rank[b] < rank[a]:  # b's band is ahead
                assert start[b] <= start[a]
                overtaken += start[b] < start[a]
    assert overtaken > 0  # some short job submitted first ran after a long one
    true_steps = jobs["duration"] / jobs["step_s"]
    predicted = true_steps * jobs["pred_step_s"]
    assert not np.allclose(predicted, jobs["duration"], rtol=0.05)  # the predictor's error
    fifo = run_recmix("kube-exclusive", 5, n_jobs=60, queue_order="fifo")
    assert fifo.explain["sm_seconds"] == pytest.approx(run.explain["sm_seconds"])  # same work


def test_critical_first_queue_starts_the_longest_band_then_short_before_medium():
    """Whole GPUs, all jobs at t = 0, critical-first: the critical bands (the longest two of
    four) start first, longest first; the other bands follow shortest first (FIFO within a
    band), whatever the submission order."""
    from bench.sim.recmix_replay import queue_rank
    from extender.queueorder import DurationBands

    detail: dict = {}
    run = run_recmix("kube-exclusive", 5, n_jobs=60, queue_order="bands-critical-first",
                     detail=detail)
    assert run.mode == "high-load-bands-critical-first"
    jobs, start = detail["jobs"], detail["first_start"]
    band = -queue_rank(jobs, order="longest-first") - 1000  # 0 shortest .. 3 longest
    taken = [3, 2, 0, 1]  # the queue's order of bands
    assert set(band) == set(taken)
    place = np.array([taken.index(b) for b in band])
    rule = DurationBands((1.0, 3.9, 15.2), order="critical-first")  # same spacing
    assert (queue_rank(jobs, order="critical-first")
            == -np.array([rule.priority(b) for b in band])).all()
    for a in range(len(jobs)):
        for b in range(a + 1, len(jobs)):  # a was submitted before b
            if place[a] == place[b]:
                assert start[a] <= start[b]
            else:
                first, then = (a, b) if place[a] < place[b] else (b, a)
                assert start[first] <= start[then]
    first_long = min(start[band == 3])
    assert first_long == 0.0 and max(start[band == 3]) <= min(start[band == 2])
    assert max(start[band == 2]) <= min(start[band == 0])
    assert max(start[band == 0]) <= min(start[band == 1])  # short before medium
    later_long = [b for b in range(len(jobs)) if band[b] == 3
                  and any(band[a] < 3 for a in range(b))]
    assert later_long  # a long job submitted after short ones still started before them


def test_sparse_as_shipped_queues_in_the_charts_default_order():
    """The simulator's `product` order for sparse is what the chart installs by default."""
    from pathlib import Path

    import yaml

    from bench.sim.queueing import PRODUCT_BAND_ORDER, queue_rule

    values = yaml.safe_load((Path(__file__).resolve().parents[2] / "charts" / "sparse"
                             / "values.yaml").read_text())
    assert values["controller"]["queueOrder"] == PRODUCT_BAND_ORDER == "latest-start"
    # the controller's latest-start is the replay's arrival-aware, least-slack promotion,
    # with the long gangs ahead while below their share of the GPUs
    assert queue_rule("product", "sparse") == "gang-share"
    assert queue_rule("product", "kube-shared") == "product"
