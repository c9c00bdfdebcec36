"""What the product can know of a trace job's length: declared steps x the predictor's step time.

A trace pod has a duration but no model. A job that declares its training length in steps
(``spec.steps``) runs ``steps x true step time``; the job controller bands it by ``steps x
predicted step time`` (extender/queueorder.py). The predicted duration is therefore the true
one times ``predicted step / measured step`` of the job's model: the predictor's step-time
error. That error is measured, not assumed: the ratio of ``features.step_seconds`` (structure
only, no fitted weights) to the measured step time on every GPU-measured row of the predictor's
dataset (``bench.sim.recmix.measured_profiles``). Each job draws one row, from the rows of its
job class where the dataset has that class, else from all rows, and takes that row's ratio
(seeded, independent of the replay's other draws, the same draws for every policy of a seed).

A job declares steps with probability ``declared_share``; the others have no predicted
duration (NaN), and the controller gives them its default band, FIFO within it.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

ERROR_STREAM = 0x5EED_D0  # the error draws' own RNG stream: the replay's draws stay as they were


@lru_cache(maxsize=1)
def step_time_errors() -> dict[str, np.ndarray]:
    """Job class -> log(predicted step / measured step) of the measured rows of that class;
    ``""``: all rows."""
    from bench.sim.recmix import measured_profiles

    prof = measured_profiles(False)
    err = np.log(prof["pred_step_s"].to_numpy(float) / prof["step_s"].to_numpy(float))
    classes = prof["job_class"].to_numpy()
    out = {str(c): err[classes == c] for c in np.unique(classes)}
    out[""] = err
    return out


def predicted_durations(work: np.ndarray, classes: np.ndarray, seed: int, *,
                        declared_share: float = 1.0,
                        errors: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Each job's predicted duration (seconds; NaN where it declares no steps): its true
    duration ``work`` times the step-time error of a measured row drawn for it."""
    if not 0.0 <= declared_share <= 1.0:
        raise ValueError(f"declared share must be in [0, 1], got {declared_share!r}")
    errors = step_time_errors() if errors is None else errors
    rng = np.random.default_rng([ERROR_STREAM, int(seed)])
    work = np.asarray(work, dtype=np.float64)
    log_err = np.empty(len(work))
    u = rng.random(len(work))
    for j, c in enumerate(classes):
        pool = errors.get(str(c))
        pool = errors[""] if pool is None or not len(pool) else pool
        log_err[j] = pool[int(u[j] * len(pool))]
    declared = rng.random(len(work)) < declared_share
    return np.where(declared, work * np.exp(log_err), np.nan)
