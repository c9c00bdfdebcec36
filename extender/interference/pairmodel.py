"""Learned pairwise interference: the speed job A keeps next to job B, from their solo profiles.

Pure: numpy and a JSON read. A profile is what every cluster measures for a job running alone
(nvidia-smi / DCGM): GPU utilisation %, memory-controller utilisation %, GPU memory used MiB
(NaN where unknown). ``PairModel.predict(a, b)`` returns ``a_speed`` = A's throughput next to
B / A's solo throughput, in [SPEED_MIN, 1].

The artefact (``data/pair_model.json``, written by ``sparse-bench interference train``) is a
gradient-boosted tree ensemble (LightGBM's own dump, flattened) over :func:`derive`'s
features; evaluating it needs no LightGBM: all trees descend together, one gather per level.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

FORMAT = "sparse-interference/pair-gbdt/1"
RAW = ("gpu_util", "mem_util", "mem_mib")
SPEED_MIN = 0.02
FEATURES = ("a_gpu_util", "a_mem_util", "a_mem_mib", "b_gpu_util", "b_mem_util", "b_mem_mib",
            "util_product", "a_mem_x_b_util", "util_sum", "mem_util_product",
            "util_headroom", "mem_mib_sum")


def derive(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Model features from the two raw profiles (n x 3 each: util %, mem util %, MiB)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 3)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 3)
    au, am, amib = a.T
    bu, bm, bmib = b.T
    total = au + bu
    with np.errstate(divide="ignore", invalid="ignore"):
        headroom = np.minimum(1.0, 100.0 / np.where(total > 0, total, np.nan))
    headroom = np.where(total > 0, headroom, 1.0)
    return np.column_stack([au, am, amib, bu, bm, bmib, au * bu / 100.0, am * bu / 100.0,
                            total, am * bm / 100.0, headroom, amib + bmib])


@dataclass(frozen=True, eq=False)
class PairModel:
    """Flattened trees: node arrays of shape (trees, max nodes); leaves have feature -1."""

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    default_left: np.ndarray  # missing (NaN) values go left
    value: np.ndarray
    depth: int
    meta: dict

    @classmethod
    def from_json(cls, doc: dict) -> PairModel:
        if doc.get("format") != FORMAT:
            raise ValueError(f"not a pair-interference model (format {doc.get('format')!r})")
        trees = doc["trees"]
        width = max(len(t["feature"]) for t in trees)

        def pad(key: str, fill: float, dtype: type) -> np.ndarray:
            out = np.full((len(trees), width), fill, dtype=dtype)
            for i, t in enumerate(trees):
                out[i, : len(t[key])] = t[key]
            return out

        return cls(
            feature=pad("feature", -1, np.int64), threshold=pad("threshold", 0.0, np.float64),
            left=pad("left", 0, np.int64), right=pad("right", 0, np.int64),
            default_left=pad("default_left", 1, bool), value=pad("value", 0.0, np.float64),
            depth=int(doc["depth"]), meta={k: v for k, v in doc.items() if k != "trees"},
        )

    @classmethod
    def load(cls, path: str | Path) -> PairModel:
        return cls.from_json(json.loads(Path(path).read_text()))

    def raw_predict(self, features: np.ndarray) -> np.ndarray:
        x = np.asarray(features, dtype=np.float64)
        n, trees = len(x), len(self.feature)
        node = np.zeros((trees, n), dtype=np.int64)
        rows = np.arange(n)[None, :]
        t = np.arange(trees)[:, None]
        for _ in range(self.depth):
            f = self.feature[t, node]
            inner = f >= 0
            if not inner.any():
                break
            v = x[rows, np.maximum(f, 0)]
            go_left = np.where(np.isnan(v), self.default_left[t, node],
                               v <= self.threshold[t, node])
            nxt = np.where(go_left, self.left[t, node], self.right[t, node])
            node = np.where(inner, nxt, node)
        return self.value[t, node].sum(axis=0)

    def predict(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a_speed`` for each row pair of profiles ``a``, ``b`` (n x 3)."""
        if len(np.asarray(a).reshape(-1, 3)) == 0:
            return np.zeros(0)
        return np.clip(self.raw_predict(derive(a, b)), SPEED_MIN, 1.0)


def flatten_lightgbm(dump: dict) -> list[dict]:
    """LightGBM ``Booster.dump_model()`` trees as flat arrays (numerical splits only)."""
    out = []
    for info in dump["tree_info"]:
        tree: dict[str, list] = {k: [] for k in ("feature", "threshold", "left", "right",
                                                 "default_left", "value")}
        _visit(tree, info["tree_structure"])
        out.append(tree)
    return out


def _visit(tree: dict[str, list], node: dict) -> int:
    i = len(tree["feature"])
    for arr in tree.values():
        arr.append(0)
    if "split_feature" not in node:
        tree["feature"][i] = -1
        tree["value"][i] = float(node.get("leaf_value", 0.0))
        tree["default_left"][i] = 1
        return i
    if node.get("decision_type", "<=") != "<=":
        raise ValueError("only numerical '<=' splits are supported")
    threshold = float(node["threshold"])
    tree["feature"][i] = int(node["split_feature"])
    tree["threshold"][i] = threshold
    # LightGBM sends NaN to the default side only when missing_type is NaN; otherwise NaN
    # counts as 0 (missing_type Zero/None) and 0 <= threshold decides.
    if node.get("missing_type", "None") == "NaN":
        tree["default_left"][i] = int(bool(node.get("default_left", True)))
    else:
        tree["default_left"][i] = int(threshold >= 0.0)
    tree["left"][i] = _visit(tree, node["left_child"])
    tree["right"][i] = _visit(tree, node["right_child"])
    return i


def tree_depth(trees: list[dict]) -> int:
    def depth(t: dict, i: int) -> int:
        if t["feature"][i] < 0:
            return 0
        return 1 + max(depth(t, t["left"][i]), depth(t, t["right"][i]))

    return max((depth(t, 0) for t in trees), default=0)


@lru_cache(maxsize=1)
def default_pair_model() -> PairModel | None:
    """The shipped model, or None when the package carries none (the class matrix is used)."""
    ref = resources.files("extender.interference").joinpath("data/pair_model.json")
    if not ref.is_file():
        return None
    return PairModel.from_json(json.loads(ref.read_text()))
