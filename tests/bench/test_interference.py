"""Pairwise interference model: exported trees equal LightGBM, Gavel table, CLI evaluate."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.interference import gavel
from bench.interference.training import fit, read_pairs
from extender.interference.pairmodel import PairModel, default_pair_model, derive


def _random_table(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    au, bu = rng.uniform(0, 100, n), rng.uniform(0, 100, n)
    am, bm = rng.uniform(0, 60, n), rng.uniform(0, 60, n)
    amib = np.where(rng.random(n) < 0.3, np.nan, rng.uniform(500, 40000, n))
    bmib = rng.uniform(500, 40000, n)
    speed = 1 / ((1 - au / 100) + au / 100 * (1 + bu / 100)) - 0.002 * bm
    return pd.DataFrame({"a_gpu_util": au, "a_mem_util": am, "a_mem_mib": amib,
                         "b_gpu_util": bu, "b_mem_util": bm, "b_mem_mib": bmib,
                         "a_speed": np.clip(speed, 0.05, 1)})


def test_exported_trees_predict_exactly_like_lightgbm():
    import lightgbm as lgb

    from bench.interference.training import PARAMS, profiles_of

    table = _random_table()
    x = derive(profiles_of(table, "a"), profiles_of(table, "b"))
    booster = lgb.train(PARAMS, lgb.Dataset(x, table["a_speed"].to_numpy()), 40)
    from extender.interference.pairmodel import FORMAT, flatten_lightgbm, tree_depth

    trees = flatten_lightgbm(booster.dump_model())
    model = PairModel.from_json({"format": FORMAT, "depth": tree_depth(trees), "trees": trees})
    probe = _random_table(200, seed=1)
    xp = derive(profiles_of(probe, "a"), profiles_of(probe, "b"))
    np.testing.assert_allclose(model.raw_predict(xp), booster.predict(xp), rtol=1e-9, atol=1e-9)


def test_model_learns_the_direction_of_interference():
    model = PairModel.from_json(fit(_random_table(300), rounds=25))
    quiet, busy = model.predict([[60, 10, 2000]] * 2, [[5, 5, 2000], [95, 5, 2000]])
    assert quiet > busy


def test_gavel_table_keeps_held_out_pairs_out_of_the_profiles():
    pairs = gavel.measured_pairs()
    assert len(pairs) > 1500 and pairs["a_speed"].between(0, 1).all()
    held = gavel.split_pairs(pairs, 0.2, 0)
    # both directions of a pair are on the same side of the split
    assert pairs[held].groupby("pair").size().min() >= 1
    assert not set(pairs[held]["pair"]) & set(pairs[~held]["pair"])
    prof = gavel.profiles(pairs[~held])
    table = gavel.pair_table(pairs[held], prof)
    assert list(table.columns[:7]) == list(gavel.COLUMNS)
    assert table["a_gpu_util"].between(0, 100).all() and table["a_mem_mib"].isna().all()


def test_shipped_model_scores_held_out_pairs(tmp_path):
    model = default_pair_model()
    assert model is not None and model.meta["format"].startswith("sparse-interference")
    res = CliRunner().invoke(main, ["interference", "evaluate", "--json", "--pairs",
                                    "bench/data/gavel/gavel_pairs_heldout.csv"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["n"] > 300 and out["r2"] >= 0.75 and out["mae"] < 0.1


def test_evaluate_rejects_a_file_without_the_columns(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("a_gpu_util,b_gpu_util\n10,20\n")
    with pytest.raises(ValueError, match="missing column"):
        read_pairs(path)
    res = CliRunner().invoke(main, ["interference", "evaluate", "--pairs", str(path)])
    assert res.exit_code != 0 and "missing column" in res.output


HEADER = "a_gpu_util,a_mem_util,a_mem_mib,b_gpu_util,b_mem_util,b_mem_mib,a_speed\n"


def test_evaluate_reads_exactly_the_seven_columns_and_prints_r2_and_mae(tmp_path):
    """Extra columns and column order do not matter; memory may be unknown (empty); the
    figures equal the model's predictions scored by hand."""
    rows = [(80, 30, 9000, 70, 20, "", 0.62), (20, 5, "", 15, 3, 1200, 0.97),
            (55, 40, 30000, 60, 35, 20000, 0.71), (35, 10, 4000, 90, 50, "", 0.55)]
    path = tmp_path / "p.csv"
    path.write_text("note,a_speed,b_mem_mib,b_mem_util,b_gpu_util,a_mem_mib,a_mem_util,a_gpu_util\n"
                    + "".join(f"x,{s},{bm},{bu2},{bu},{am},{au2},{au}\n"
                              for au, au2, am, bu, bu2, bm, s in rows))
    res = CliRunner().invoke(main, ["interference", "evaluate", "--json", "--pairs", str(path)])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    model = default_pair_model()
    num = lambda v: float("nan") if v == "" else float(v)  # noqa: E731
    a = np.array([[num(r[0]), num(r[1]), num(r[2])] for r in rows])
    b = np.array([[num(r[3]), num(r[4]), num(r[5])] for r in rows])
    y = np.array([r[6] for r in rows])
    pred = model.predict(a, b)
    assert out["n"] == 4
    assert out["mae"] == pytest.approx(float(np.abs(pred - y).mean()))
    assert out["r2"] == pytest.approx(1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum())
    text = CliRunner().invoke(main, ["interference", "evaluate", "--pairs", str(path)])
    assert text.exit_code == 0 and "R2=" in text.output and "MAE=" in text.output


@pytest.mark.parametrize(("body", "message"), [
    ("", "not a readable CSV"),
    (HEADER + "50,10,,60,busy,,0.5\n40,10,,60,5,,0.7\n", "b_mem_util is not a number on line(s) 2"),
    (HEADER + "50,10,,60,5,,\n40,10,,60,5,,0.7\n", "a_speed is empty on line(s) 2"),
    (HEADER + "50,10,,60,5,,0.5\n140,10,,60,5,,0.7\n", "a_gpu_util must be a percentage"),
    (HEADER + "50,10,-3,60,5,,0.5\n40,10,,60,5,,0.7\n", "a_mem_mib must be >= 0"),
    (HEADER + "50,10,,60,5,,0\n40,10,,60,5,,0.7\n", "a_speed"),
    (HEADER + "0.5,0.1,,0.6,0.05,,0.5\n0.4,0.1,,0.6,0.05,,0.7\n", "in % (0..100)"),
    (HEADER + "50,10,,60,5,,0.5\n", "at least 2 rows"),
])
def test_evaluate_rejects_bad_pair_files_with_a_clear_error(tmp_path, body, message):
    path = tmp_path / "p.csv"
    path.write_text(body)
    with pytest.raises(ValueError, match=re.escape(message)):
        read_pairs(path)
    res = CliRunner().invoke(main, ["interference", "evaluate", "--pairs", str(path)])
    assert res.exit_code == 1 and message in res.output and "Traceback" not in res.output


def test_evaluate_rejects_a_bad_model_file(tmp_path):
    model = tmp_path / "m.json"
    model.write_text("{not json")
    res = CliRunner().invoke(main, ["interference", "evaluate", "--model", str(model),
                                    "--pairs", "bench/data/gavel/gavel_pairs_heldout.csv"])
    assert res.exit_code == 1 and "not a pair model" in res.output


def test_sparse_steers_a_known_profile_away_from_a_harmful_co_runner():
    """Two GPUs, each with one resident of the same class; only the learned model (which
    sees their profiles) can tell them apart, and sparse picks the quiet one."""
    from extender.demand import ContainerRequest, PodDemand
    from extender.interference.matrix import default_matrix
    from extender.interference.profiles import ProfileBook
    from extender.inventory import Gpu, Inventory, NodeGpus
    from extender.ledger.rules import Allocation, Reservation
    from extender.placement import ClusterState, assign, fit, node_costs
    from extender.placement.policies.sparse import Sparse

    inv = Inventory.of([NodeGpus("n1", (Gpu("g0", 0, "H200", 143771),)),
                        NodeGpus("n2", (Gpu("g1", 0, "H200", 143771),))])
    state = ClusterState.build(inv, default_matrix())
    book = state.profiles = ProfileBook(default_pair_model())
    for uid, gpu, prof in (("busy", "g0", (98.0, 60.0, 20000.0)),
                           ("quiet", "g1", (5.0, 1.0, 1500.0))):
        book.add(uid, prof)
        state.apply(Reservation(uid, "ns", uid, "n1" if gpu == "g0" else "n2",
                                (Allocation(gpu, "main", 2000, 200),), job_class="cnn"))
    c = ContainerRequest("main", 0, 200, 2000)
    demand = PodDemand(uid="new", namespace="ns", name="new", containers=(c,), whole_gpus=0,
                       share_milli=200, share_mem_mib=2000, job_class="recommendation",
                       share_containers=(c,))
    book.add("new", (60.0, 10.0, 2000.0))
    assert book.speed(book.id_of("new"), book.id_of("quiet")) > book.speed(
        book.id_of("new"), book.id_of("busy"))
    policy = Sparse(order_weight=0.0, frag_weight=0.0)
    result = fit(state, demand, ["n1", "n2"], explain=False)
    costs = node_costs(state, demand, result, policy)
    assert result.names[int(np.argmin(costs))] == "n2"
    assert assign(state, demand, "n2", policy) is not None
    state.unapply("quiet")
    assert 1 not in state.resident_pods  # bookkeeping follows the ledger


def test_gpu_pair_script_picks_one_small_config_per_measured_family():
    from bench.interference.gpupairs import COLUMNS, MAX_MIB, pick_configs
    from bench.sim.recmix import measured_profiles

    picks = pick_configs()
    assert set(picks) == set(measured_profiles()["family"])  # families come from the data
    assert all(p["mib"] <= MAX_MIB and "family" in p["cfg"] for p in picks.values())
    assert list(COLUMNS[3:10]) == [*gavel.COLUMNS]  # rows `evaluate --pairs` reads as they are
