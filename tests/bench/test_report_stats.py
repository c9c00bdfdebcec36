"""Percentile curves over runs stay quiet where every run has stopped (all-NaN columns)."""

from __future__ import annotations

import warnings

import numpy as np

from bench.sim.report import _column_percentile


def test_all_nan_columns_give_nan_without_a_warning() -> None:
    ys = np.array([[1.0, 2.0, np.nan, np.nan],
                   [3.0, np.nan, np.nan, np.nan]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        med = _column_percentile(ys, 50)
        assert np.isnan(_column_percentile(np.full((2, 3), np.nan), 25)).all()
    assert med[0] == 2.0 and med[1] == 2.0
    assert np.isnan(med[2:]).all()
