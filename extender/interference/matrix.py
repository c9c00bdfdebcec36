"""Class-pair slowdown matrix and the loss of placing one class next to others."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from extender.demand import UNKNOWN_CLASS
from extender.errors import InvalidInventory

ALIASES = {
    "bert": "transformer",
    "gpt": "transformer",
    "llm": "transformer",
    "resnet": "cnn",
    "resnet50": "cnn",
    "yolo": "cnn",
    "vision": "cnn",
    "resnet18": "cnn-small",
    "lstm": "rnn",
    "lm": "rnn",
    "dlrm": "recommendation",
    "deepfm": "recommendation",
    "wide-deep": "recommendation",
    "widedeep": "recommendation",
    "ctr": "recommendation",
    "recsys": "recommendation",
    "a3c": "rl",
    "cyclegan": "gan",
}


@dataclass(frozen=True, eq=False)
class InterferenceMatrix:
    """``norm[a, b]``: throughput fraction class a keeps next to class b. The last class is
    ``unknown``, whose row and column are the means of the measured ones."""

    classes: tuple[str, ...]
    norm: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {c: i for i, c in enumerate(self.classes)})
        object.__setattr__(self, "_log_norm", np.log(self.norm))

    _index: dict[str, int] = None  # type: ignore[assignment]
    _log_norm: np.ndarray = None  # type: ignore[assignment]

    @classmethod
    def from_measured(cls, classes: list[str], norm: np.ndarray) -> InterferenceMatrix:
        if norm.shape != (len(classes), len(classes)):
            raise InvalidInventory("interference matrix must be square with one row per class")
        if not np.all((norm > 0) & (norm <= 1.5)):
            raise InvalidInventory("interference values must be in (0, 1.5]")
        n = len(classes)
        full = np.empty((n + 1, n + 1))
        full[:n, :n] = np.minimum(norm, 1.0)  # >1 is measurement noise (clipped upstream too)
        full[n, :n] = full[:n, :n].mean(axis=0)
        full[:n, n] = full[:n, :n].mean(axis=1)
        full[n, n] = full[:n, :n].mean()
        return cls(tuple(classes) + (UNKNOWN_CLASS,), full)

    def index(self, job_class: str) -> int:
        """Index of a class name (aliases understood); unknown names map to ``unknown``."""
        name = job_class.strip().lower()
        name = ALIASES.get(name, name)
        return self._index.get(name, self._index[UNKNOWN_CLASS])

    def knows(self, job_class: str) -> bool:
        """Whether the class (or an alias) has a measured row, i.e. is not ``unknown``."""
        return self.index(job_class) != self._index[UNKNOWN_CLASS]

    def pair(self, victim: str, co_runner: str) -> float:
        return float(self.norm[self.index(victim), self.index(co_runner)])

    def placement_loss(self, job_class: str, fraction: float, resident_frac: np.ndarray,
                       survival: np.ndarray | None = None) -> np.ndarray:
        """Throughput lost, in GPUs' worth, if a job of ``job_class`` using ``fraction`` of a
        GPU joins each GPU whose residents use ``resident_frac[g, c]`` (summed GPU fractions
        per class). A job that uses f of a GPU slows its co-runners as if present f of the
        time: a job of class a keeps norm(a|b) ** f_b of its speed next to b.

            loss = f_a (1 - prod_b norm(a|b) ** f_b) + sum_b f_b (1 - norm(b|a) ** f_a)

        With whole jobs (f = 1) and one resident this is (1 - norm(a|b)) + (1 - norm(b|a)),
        the measured pairwise loss. ``survival``: ``survival(job_class, resident_frac)``,
        where the caller holds it (read, not written)."""
        a = self.index(job_class)
        if survival is None:  # in place: the same steps in the same order, no temporaries
            loss = self.survival(job_class, resident_frac)
            np.subtract(1.0, loss, out=loss)
        else:
            loss = np.subtract(1.0, survival)
        loss *= fraction  # the victim's part
        loss += resident_frac @ (1.0 - self.norm[:, a] ** fraction)  # its co-runners'
        return loss

    def survival(self, job_class: str, resident_frac: np.ndarray) -> np.ndarray:
        """prod_b norm(a|b) ** f_b per GPU: the share of its speed a whole job of
        ``job_class`` keeps beside each GPU's residents. It does not depend on the job's own
        fraction, so one serves every share size of the class (``placement_loss``)."""
        kept = resident_frac @ self._log_norm[self.index(job_class)]
        return np.exp(kept, out=kept)


def parse_csv(text: str) -> InterferenceMatrix:
    rows = [r for r in csv.reader(io.StringIO(text)) if r and not r[0].lstrip().startswith("#")]
    if len(rows) < 2:
        raise InvalidInventory("interference CSV needs a header and at least one row")
    header = [h.strip().lower() for h in rows[0][1:]]
    by_row = {r[0].strip().lower(): r[1:] for r in rows[1:]}
    if sorted(by_row) != sorted(header):
        raise InvalidInventory("interference CSV: row classes must equal column classes")
    try:
        norm = np.array([[float(v) for v in by_row[c]] for c in header])
    except ValueError as exc:
        raise InvalidInventory(f"interference CSV: {exc}") from exc
    return InterferenceMatrix.from_measured(header, norm)


def load_matrix(path: str | Path) -> InterferenceMatrix:
    return parse_csv(Path(path).read_text())


@lru_cache(maxsize=1)
def default_matrix() -> InterferenceMatrix:
    text = resources.files("extender.interference").joinpath("data/gavel_v100.csv").read_text()
    return parse_csv(text)
