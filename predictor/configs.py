"""The seeded sweep of model configs the dataset measures (docs/predictor.md, 'Dataset'):
the families, how many configs each, and the random draw of one config (plain dicts that
``predictor.generate`` builds into PyTorch models). Deterministic for a seed; a row id names
one config of one seed's sweep."""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Iterable
from typing import Any

from predictor import schema

REC_FAMILIES = ("wide_deep", "deepfm", "dlrm")
# recommendation architectures of other structures (predictor/generate/families.py); their
# annotation is what ``describe`` reads off the model (tables from the lookups it sees)
NEW_FAMILIES = ("din", "two_tower", "mmoe", "fm", "sasrec", "qr_dlrm", "mixed_dim")
FAMILIES = (*REC_FAMILIES, "resnet", "bert", "yolo", *NEW_FAMILIES)
PER_FAMILY = {"wide_deep": 45, "deepfm": 45, "dlrm": 45, "resnet": 35, "bert": 35, "yolo": 35,
              **{f: 12 for f in NEW_FAMILIES}}

# Sparse gradients have data-dependent sizes (unique ids); those configs always run for real.
SPARSE_MAX_TABLE_BYTES = 512 * 2**20
MAX_TABLE_BYTES = 48 * 2**30  # keep every config trainable on one 80 GB GPU
ROW_ID_STRIDE = 1000  # row_id = seed * ROW_ID_STRIDE + index in that seed's sweep
SEEDS = (0, 1)  # the sweeps of the committed dataset


def _logu(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _rec_config(rng: random.Random, family: str) -> dict[str, Any]:
    sparse = rng.random() < 0.2
    if sparse:
        optimizer = rng.choice(["sgd", "adagrad", "sparse_adam"])
    else:
        optimizer = rng.choice(["sgd", "momentum", "adagrad", "adam", "adamw", "rmsprop"])
    dtype = "fp32" if sparse else rng.choice(["fp32", "fp32", "fp16", "bf16"])
    n_feat = int(_logu(rng, 8, 64 if not sparse else 26))
    dim = rng.choice([8, 16, 32, 64, 128] if not sparse else [8, 16, 32])
    dtype_b = schema.DTYPE_BYTES[dtype]
    cap = SPARSE_MAX_TABLE_BYTES if sparse else rng.choice([2**28, 2**31, 2**33, MAX_TABLE_BYTES])
    # Criteo-like mix: Zipf-ish heavy tail of table sizes, 1e3..1e8 rows
    rows = [int(min(1e8, 1e3 * (1 / (1 - rng.random())) ** 2.2)) for _ in range(n_feat)]
    scale = min(1.0, cap / (sum(rows) * dim * dtype_b))
    rows = [max(100, int(r * scale)) for r in rows]
    tables = [(r, dim, float(int(_logu(rng, 1, 50)))) for r in rows]
    return {
        "family": family,
        "tables": tables,
        "dense_features": 13,
        "bottom_mlp": [int(_logu(rng, 64, 1024)) for _ in range(rng.randint(1, 3))],
        "top_mlp": [int(_logu(rng, 64, 1024)) for _ in range(rng.randint(1, 4))],
        "batch_size": int(2 ** rng.randint(8, 16)) if not sparse else 2 ** rng.randint(8, 12),
        "optimizer": optimizer,
        "dtype": dtype,
        "sparse_grad": sparse,
    }


def _resnet_config(rng: random.Random) -> dict[str, Any]:
    arch = rng.choice(["r10", "r18", "r34", "r50"])
    blocks = {"r10": [1, 1, 1, 1], "r18": [2, 2, 2, 2], "r34": [3, 4, 6, 3], "r50": [3, 4, 6, 3]}
    image = rng.choice([32, 64, 128, 224])
    return {
        "family": "resnet", "width": rng.choice([16, 32, 64]), "blocks": blocks[arch],
        "bottleneck": arch == "r50", "image": image, "classes": rng.choice([10, 100, 1000]),
        "batch_size": 2 ** rng.randint(2 if image >= 128 else 4, 8),
        "optimizer": rng.choice(["sgd", "momentum", "adam", "adamw"]),
        "dtype": rng.choice(["fp32", "fp16", "bf16"]),
    }


def _bert_config(rng: random.Random) -> dict[str, Any]:
    d = rng.choice([128, 256, 384, 512, 768])
    return {
        "family": "bert", "d_model": d, "heads": max(1, d // 64), "layers": rng.randint(2, 12),
        "seq_len": rng.choice([64, 128, 256, 512]), "vocab": rng.choice([8192, 30522]),
        "batch_size": 2 ** rng.randint(2, 6),
        "optimizer": rng.choice(["adam", "adamw", "sgd", "momentum"]),
        "dtype": rng.choice(["fp32", "fp16", "bf16"]),
    }


def _yolo_config(rng: random.Random) -> dict[str, Any]:
    return {
        "family": "yolo", "width": rng.choice([8, 16, 32]), "depth": rng.randint(1, 3),
        "image": rng.choice([160, 256, 320, 416, 640]), "classes": 80,
        "batch_size": 2 ** rng.randint(1, 5),
        "optimizer": rng.choice(["sgd", "momentum", "adam", "adamw"]),
        "dtype": rng.choice(["fp32", "fp16", "bf16"]),
    }


def _training_choices(rng: random.Random, sparse_ok: bool = True) -> dict[str, Any]:
    """Optimizer, its implementation, dtype and gradient layout of a new-family config."""
    sparse = sparse_ok and rng.random() < 0.25
    if sparse:
        return {"optimizer": rng.choice(["sgd", "adagrad", "sparse_adam"]), "dtype": "fp32",
                "sparse_grad": True, "optimizer_impl": rng.choice(["foreach", "single"])}
    opt = rng.choice(["sgd", "momentum", "adagrad", "adam", "adamw", "rmsprop"])
    impls = ["foreach", "single"] + (["fused"] if opt != "rmsprop" else [])
    return {"optimizer": opt, "optimizer_impl": rng.choice(impls), "sparse_grad": False,
            "dtype": rng.choice(["fp32", "fp32", "bf16", "fp16"])}


def _rows(rng: random.Random, n: int, cap_bytes: float, dim: int, lo: int = 100) -> list[int]:
    rows = [int(min(1e8, 1e3 * (1 / (1 - rng.random())) ** 2.2)) for _ in range(n)]
    scale = min(1.0, cap_bytes / (sum(rows) * dim * 4))
    return [max(lo, int(r * scale)) for r in rows]


def _new_family_config(rng: random.Random, fam: str) -> dict[str, Any]:
    t = _training_choices(rng, sparse_ok=fam != "sasrec")
    cap = 2**27 if t["sparse_grad"] else rng.choice([2**27, 2**30, 2**33])
    dim = rng.choice([8, 16, 32, 64] if t["sparse_grad"] else [8, 16, 32, 64, 128])
    b = 2 ** rng.randint(7, 12 if t["sparse_grad"] else 14)
    cfg: dict[str, Any] = {"family": fam, "batch_size": b, **t, "dim": dim,
                           "bag": rng.random() < 0.7, "mode": rng.choice(["sum", "mean"])}
    mlp = [int(_logu(rng, 32, 512)) for _ in range(rng.randint(1, 3))]
    if fam == "din":
        n_user = rng.randint(1, 6)
        rows = _rows(rng, n_user + 1, cap, dim)
        cfg.update(items=rows[0] * 10, seq_len=rng.choice([10, 20, 50, 100]),
                   user_tables=[(r, float(rng.randint(1, 10))) for r in rows[1:]],
                   att_mlp=[int(_logu(rng, 16, 128))], top_mlp=mlp,
                   batch_size=min(b, 2**12))
    elif fam == "two_tower":
        rows = _rows(rng, rng.randint(3, 12), cap, dim)
        k = max(1, len(rows) // 2)
        cfg.update(items=rows[0] * 10, seq_len=float(rng.randint(5, 50)),
                   user_tables=[(r, float(rng.randint(1, 5))) for r in rows[1:k]],
                   item_tables=[(r, float(rng.randint(1, 5))) for r in rows[k:]],
                   tower=mlp + [dim], batch_size=min(b, 2**12))
    elif fam == "mmoe":
        rows = _rows(rng, rng.randint(4, 30), cap, dim)
        cfg.update(tables=[(r, float(rng.randint(1, 8))) for r in rows], dense_features=13,
                   experts=rng.randint(2, 8), tasks=rng.randint(2, 4),
                   expert=[int(_logu(rng, 64, 512)) for _ in range(rng.randint(1, 2))],
                   tower=[int(_logu(rng, 16, 128))])
    elif fam == "fm":
        rows = _rows(rng, rng.randint(8, 40), cap, dim)
        cfg.update(tables=[(r, float(rng.choice([1, 1, 2, 5, 20]))) for r in rows],
                   batch_size=2 ** rng.randint(8, 15 if not t["sparse_grad"] else 12))
    elif fam == "sasrec":
        d = rng.choice([32, 64, 128, 256])
        cfg.update(dim=d, heads=rng.choice([1, 2, 4]), layers=rng.randint(1, 4),
                   items=rng.choice([5000, 20000, 60000]), seq_len=rng.choice([20, 50, 100, 200]),
                   batch_size=2 ** rng.randint(4, 8), causal=rng.random() < 0.7,
                   pre_ln=rng.random() < 0.5)
    elif fam == "qr_dlrm":
        rows = _rows(rng, rng.randint(4, 26), cap * 8, dim)
        cfg.update(tables=[(r, float(rng.randint(1, 20))) for r in rows], dense_features=13,
                   collisions=rng.choice([4, 16, 60]), bottom_mlp=mlp, top_mlp=mlp[::-1])
    elif fam == "mixed_dim":
        n = rng.randint(4, 26)
        dims = [rng.choice([4, 8, 16, 32, 64, 128]) for _ in range(n)]
        rows = _rows(rng, n, cap, 32)
        cfg.update(tables=[(r, d, float(rng.randint(1, 20)))
                           for r, d in zip(rows, dims, strict=True)],
                   dense_features=13, bottom_mlp=mlp, top_mlp=mlp[::-1])
    return cfg


def sweep(seed: int = 0, per_family: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The documented sweep (docs/predictor.md, 'Dataset'); deterministic for a seed. New
    families come after the first six, so earlier rows keep their row ids."""
    counts = per_family or PER_FAMILY
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for fam, n in counts.items():
        for _ in range(n):
            if fam in REC_FAMILIES:
                out.append(_rec_config(rng, fam))
            elif fam in NEW_FAMILIES:
                out.append(_new_family_config(rng, fam))
            else:
                out.append({"resnet": _resnet_config, "bert": _bert_config,
                            "yolo": _yolo_config}[fam](rng))
    return out


def configs_for(seeds: Iterable[int]) -> list[tuple[int, dict[str, Any]]]:
    """(row_id, config) over the sweeps of ``seeds``; row_id = seed * ROW_ID_STRIDE + index."""
    return [(seed * ROW_ID_STRIDE + i, cfg) for seed in seeds for i, cfg in enumerate(sweep(seed))]


def config_of(row_id: int) -> dict[str, Any] | None:
    seed, i = divmod(row_id, ROW_ID_STRIDE)
    configs = _sweep_cached(seed)
    return configs[i] if i < len(configs) else None


@functools.lru_cache(maxsize=8)
def _sweep_cached(seed: int) -> list[dict[str, Any]]:
    return sweep(seed)
