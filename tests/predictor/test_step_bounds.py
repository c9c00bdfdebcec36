"""Per-family bounds of the step-time estimate's under-estimate (predictor/step_bounds.py) and
the rule that picks one for a job (extender/queueorder.StepErrorBounds)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from extender.queueorder import StepErrorBounds

DATA = {"quantile": 0.9, "pooled": 2.0, "families": {"bert": 1.0, "dlrm": 3.0},
        "classes": {"recommendation": 2.5}}


def test_the_family_bound_then_the_class_bound_then_the_pooled_one():
    b = StepErrorBounds.from_dict(DATA)
    assert b.margin("dlrm", "recommendation") == 3.0
    assert b.margin("deepfm", "recommendation") == 2.5
    assert b.margin(None, "recommendation") == 2.5
    assert b.margin("yolo", "cnn") == 2.0 and b.margin() == 2.0


@pytest.mark.parametrize("bad", [{**DATA, "pooled": 0}, {**DATA, "families": {"x": -1}},
                                 {**DATA, "quantile": 1.0}, {"pooled": 2.0}])
def test_bad_bounds_are_refused_with_a_message(bad):
    with pytest.raises(ValueError, match="bound|quantile"):
        StepErrorBounds.from_dict(bad)


def test_the_shipped_bounds_are_what_the_script_computes_from_the_rows():
    from predictor import step_bounds

    shipped = json.loads((step_bounds.MODELS_DIR / step_bounds.BOUNDS_FILE).read_text())
    assert step_bounds.compute(shipped["quantile"]) == shipped
    family, _, ratio = step_bounds.step_ratios()
    for f, v in shipped["families"].items():
        assert v == pytest.approx(np.quantile(ratio[family == f], shipped["quantile"]),
                                  abs=1e-4)
        # the bound covers the quantile's share of its family's rows
        assert (ratio[family == f] <= v + 1e-4).mean() >= shipped["quantile"] - 0.05
    assert step_bounds.load().pooled == shipped["pooled"]
    median = json.loads((step_bounds.MEDIAN_DIR / step_bounds.BOUNDS_FILE).read_text())
    assert median["quantile"] == 0.5 and step_bounds.compute(0.5) == median
    assert step_bounds.load_median().pooled == median["pooled"]


def test_a_missing_bounds_file_says_how_to_make_it(tmp_path):
    from predictor.step_bounds import load

    with pytest.raises(RuntimeError, match="step-bounds"):
        load(tmp_path)


def test_bounds_of_another_quantile_are_read_from_the_folder_the_environment_names(
        tmp_path, monkeypatch):
    from predictor import step_bounds

    (tmp_path / step_bounds.BOUNDS_FILE).write_text(json.dumps(DATA))
    monkeypatch.setenv(step_bounds.BOUNDS_DIR_ENV, str(tmp_path))
    assert step_bounds.load().margin("dlrm") == 3.0


def test_the_command_writes_the_bounds_it_prints(tmp_path):
    from click.testing import CliRunner

    from predictor import step_bounds
    from predictor.cli import main

    out = CliRunner().invoke(main, ["step-bounds", "--quantile", "0.5", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    written = json.loads((tmp_path / step_bounds.BOUNDS_FILE).read_text())
    assert written["quantile"] == 0.5 and written == step_bounds.compute(0.5)
    assert step_bounds.load(tmp_path).margin("bert") == written["families"]["bert"]
