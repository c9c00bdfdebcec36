"""The measured dataset: sweep definition, runner and CSV I/O.

``sweep(seed)`` lists model configs (plain dicts); ``run(...)`` measures each with
``generate.measure`` (CPU) or ``generate.gpu`` (CUDA) and writes one CSV row per config with the
:class:`~predictor.schema.ModelSpec` JSON a user would put in ``sparse.io/model`` plus the
measured columns. Reading the CSV (``load``) needs only pandas; torch is imported lazily by
``run``.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec

from predictor import features, gpus, schema

DATA_DIR = Path(__file__).parent / "data"
DEFAULT_CSV = DATA_DIR / "dataset-cpu-v1.csv"
# GPU-measured rows of the same configs (``generate --device cuda``), one file per GPU model
DEFAULT_GPU_CSV = DATA_DIR / "dataset-gpu-h200.csv"
# where generate / train / evaluate write unless told otherwise (never the source tree)
RESULTS_DIR = Path("results") / "predictor"

REC_FAMILIES = ("wide_deep", "deepfm", "dlrm")
# recommendation architectures of other structures (predictor/generate/families.py); their
# annotation is what ``describe`` reads off the model (tables from the lookups it sees)
NEW_FAMILIES = ("din", "two_tower", "mmoe", "fm", "sasrec", "qr_dlrm", "mixed_dim")
FAMILIES = (*REC_FAMILIES, "resnet", "bert", "yolo", *NEW_FAMILIES)
PER_FAMILY = {"wide_deep": 45, "deepfm": 45, "dlrm": 45, "resnet": 35, "bert": 35, "yolo": 35,
              **{f: 12 for f in NEW_FAMILIES}}

# Configs cheaper than this are re-run with real tensors; the real run's numbers are kept and
# the fake/real agreement is recorded in ``fake_real_rel_diff``.
REAL_MAX_FLOPS = 1.5e9
REAL_MAX_BYTES = 768 * 2**20
# Sparse gradients have data-dependent sizes (unique ids); those configs always run for real.
SPARSE_MAX_TABLE_BYTES = 512 * 2**20
MAX_TABLE_BYTES = 48 * 2**30  # keep every config trainable on one 80 GB GPU
ROW_ID_STRIDE = 1000  # row_id = seed * ROW_ID_STRIDE + index in that seed's sweep
SEEDS = (0, 1)  # the sweeps of the committed dataset

MEASURED = (
    "exec_mode", "label_source", "gpu_model", "n_params", "n_layers", "n_emb_params",
    "macs_per_sample",
    "activations_per_sample", "leaf_activations_per_sample", "param_bytes", "grad_bytes",
    "opt_state_bytes", "input_bytes",
    "act_fwd_bytes", "fwd_peak_bytes", "bwd_peak_bytes", "step_peak_bytes", "peak_bytes",
    "flops_fwd",
    "flops_step", "bytes_moved_step", "n_ops_step",
    "wall_s", "fake_real_rel_diff",
    # GPU mode only (empty for CPU rows)
    "gpu_max_allocated_bytes", "gpu_max_reserved_bytes", "gpu_nvml_used_bytes", "gpu_ctx_bytes",
    "gpu_util_pct", "gpu_sm_active_pct", "gpu_sm_source", "gpu_steps_per_s",
    "gpu_nvml_source", "gpu_sm_occupancy_pct", "gpu_dram_bw_pct", "gpu_tensor_active_pct",
    "gpu_nvml_errors",
    # the CUDA caching allocator replayed on the traced step (predictor.caching_allocator)
    "cuda_reserved_bytes", "cuda_allocated_bytes",
)
# Columns the CPU tracer provides that do not depend on where the step runs (GPU rows copy them).
SHAPE_COLUMNS = (
    "n_emb_params", "macs_per_sample", "activations_per_sample", "leaf_activations_per_sample",
    "param_bytes", "grad_bytes", "opt_state_bytes", "input_bytes", "act_fwd_bytes",
    "fwd_peak_bytes", "bwd_peak_bytes", "step_peak_bytes", "flops_fwd", "flops_step",
    "bytes_moved_step", "n_ops_step",
)
TEXT_COLUMNS = ("exec_mode", "label_source", "gpu_model", "gpu_sm_source", "gpu_nvml_source",
                "gpu_nvml_errors")
COLUMNS = ("row_id", "family", "job_class", "spec_json", "config_json", *MEASURED)


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


def spec_for(cfg: dict[str, Any], m: dict[str, Any], gpu_model: str) -> schema.ModelSpec:
    """The ``sparse.io/model`` a user would write for ``cfg`` (macs/params/activations as a
    profiler such as torchinfo/fvcore reports them)."""
    fam = cfg["family"]
    if fam in NEW_FAMILIES:
        return described_spec(cfg, m, gpu_model)
    tables: list[schema.Table] = []
    if fam in REC_FAMILIES:
        tables = [schema.Table(rows=r, dim=d, pooling=p) for r, d, p in cfg["tables"]]
        if fam in ("wide_deep", "deepfm"):  # wide / first-order part: 1-dim tables
            tables += [schema.Table(rows=r, dim=1, pooling=p) for r, _, p in cfg["tables"]]
    elif fam == "bert":
        s = float(cfg["seq_len"])
        tables = [schema.Table(rows=cfg["vocab"], dim=cfg["d_model"], pooling=s),
                  schema.Table(rows=cfg["seq_len"], dim=cfg["d_model"], pooling=s)]
    return schema.ModelSpec(
        family=fam, batch_size=cfg["batch_size"], optimizer=cfg["optimizer"],
        dtype=cfg["dtype"], gpu_model=gpu_model, macs=float(m["macs_per_sample"]),
        params=float(m["n_params"]), activations=float(m["activations_per_sample"]),
        inputs=float(3 * cfg["image"] ** 2) if fam in ("resnet", "yolo") else 0.0,
        layers=int(m.get("n_layers") or 0),
        tables=tables, dense_features=cfg.get("dense_features", 0),
        bottom_mlp=list(cfg.get("bottom_mlp", []) if fam == "dlrm" else []),
        top_mlp=list(cfg.get("top_mlp", [])), sparse_grad=bool(cfg.get("sparse_grad", False)),
        optimizer_impl=cfg.get("optimizer_impl") or "foreach",
        **measured_fields(m, cfg["batch_size"]),
    )


def described_spec(cfg: dict[str, Any], m: dict[str, Any], gpu_model: str) -> schema.ModelSpec:
    """The annotation ``describe`` writes for a new-family config: the tables are the lookups
    the traced step saw (rows, dim, ids per sample), the family is the generic
    ``recommendation`` (the family name is the dataset's, never the predictor's)."""
    tables = schema.group_tables([(int(r), int(d), float(p)) for r, d, p in m["tables"]])
    return schema.ModelSpec(
        family="recommendation", batch_size=cfg["batch_size"], optimizer=cfg["optimizer"],
        dtype=cfg["dtype"], gpu_model=gpu_model, macs=float(m["macs_per_sample"]),
        params=float(m["n_params"]), activations=float(m["activations_per_sample"]),
        layers=int(m.get("n_layers") or 0), tables=tables,
        dense_features=int(cfg.get("dense_features", 0)),
        sparse_grad=bool(cfg.get("sparse_grad", False)),
        optimizer_impl=cfg.get("optimizer_impl") or "foreach",
        **measured_fields(m, cfg["batch_size"]),
    )


def measured_fields(m: dict[str, Any], batch_size: int) -> dict[str, float]:
    """The annotation fields ``describe`` measures, from a traced step's columns (empty when
    the columns are missing, e.g. rows measured before these columns existed)."""
    need = ("act_fwd_bytes", "bwd_peak_bytes", "step_peak_bytes", "opt_state_bytes",
            "grad_bytes")
    if any(m.get(k) in (None, "") or m.get(k) != m.get(k) for k in need):
        return {}
    saved = float(m["act_fwd_bytes"])
    peak = float(m["bwd_peak_bytes"])
    fwd = m.get("fwd_peak_bytes")
    if fwd not in (None, "") and fwd == fwd:  # rows measured before this column lack it
        peak = max(peak, float(fwd))
    backward = peak - saved - float(m["grad_bytes"])
    out = {
        "saved_bytes": round(saved / batch_size, 3),
        "backward_bytes": round(backward / batch_size, 3),
        "step_bytes": float(m["step_peak_bytes"]),
        "state_bytes": float(m["opt_state_bytes"]),
    }
    if m.get("input_bytes") not in (None, "") and m["input_bytes"] == m["input_bytes"]:
        out["batch_bytes"] = round(float(m["input_bytes"]) / batch_size, 3)
    reserved, peak = m.get("cuda_reserved_bytes"), m.get("peak_bytes")
    if reserved not in (None, "") and reserved == reserved and peak not in (None, ""):
        # what the CUDA caching allocator reserves beyond the traced peak (the replay of
        # the CUDA program; below it where CUDA kernels keep less than the CPU ones)
        out["slack_bytes"] = float(reserved) - float(m["peak_bytes"])
    return out


def respec(df):  # noqa: ANN001, ANN201
    """``df`` with every row's annotation's measured fields recomputed from its measured
    columns (after a change to :func:`measured_fields`; the configs are not re-run)."""
    out = df.copy()
    specs = []
    for _, row in df.iterrows():
        spec = schema.parse_model(row["spec_json"])
        fields = measured_fields(row.to_dict(), spec.batch_size)
        if fields:
            spec = msgspec.structs.replace(spec, **fields)
        specs.append(msgspec.json.encode(spec).decode())
    out["spec_json"] = specs
    return out


def measure_cpu(cfg: dict[str, Any]) -> dict[str, Any]:
    from predictor.generate import measure

    if cfg.get("sparse_grad"):
        return {**measure.measure(cfg, fake=False), "fake_real_rel_diff": ""}
    m = measure.measure(cfg, fake=True)
    if m["flops_step"] <= REAL_MAX_FLOPS and m["peak_bytes"] <= REAL_MAX_BYTES:
        real = measure.measure(cfg, fake=False)
        diff = abs(real["peak_bytes"] - m["peak_bytes"]) / real["peak_bytes"]
        return {**real, "fake_real_rel_diff": round(diff, 6)}
    return {**m, "fake_real_rel_diff": ""}


def fill_replay(path: Path, row_ids: Iterable[int] | None = None,
                log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
                progress: Callable[[int, int, str], None] | None = None) -> int:
    """Trace again the configs of ``path``'s CPU rows that lack the caching-allocator replay
    (``cuda_reserved_bytes``; only ``row_ids`` when given), fill those columns and the
    annotation field derived from them, and keep every other measured column. The trace is
    the label's own (fake tensors; real ones for sparse gradients); a row whose traced peak
    now differs from its label by more than 0.5 % is left as it was and reported."""
    from predictor.generate import measure

    rows = _existing_rows(path)
    wanted = None if row_ids is None else {int(i) for i in row_ids}
    todo = [r for r in rows if r["label_source"] == "cpu" and not r.get("cuda_reserved_bytes")
            and (wanted is None or int(r["row_id"]) in wanted)]
    n = 0
    for k, row in enumerate(todo):
        cfg = json.loads(row["config_json"])
        m = measure.measure(cfg, fake=not cfg.get("sparse_grad"))
        label = float(row["peak_bytes"])
        diff = abs(m["peak_bytes"] - label) / label
        if diff > 0.005:
            log(f"#{row['row_id']} {cfg['family']}: traced peak {m['peak_bytes']} differs from "
                f"the label {label:.0f} by {100 * diff:.2f}%: left without the replay")
        else:
            row["cuda_reserved_bytes"] = str(m["cuda_reserved_bytes"])
            row["cuda_allocated_bytes"] = str(m["cuda_allocated_bytes"])
            spec = schema.parse_model(row["spec_json"])
            fields = measured_fields(row, spec.batch_size)
            if fields:
                row["spec_json"] = msgspec.json.encode(
                    msgspec.structs.replace(spec, **fields)).decode()
            n += 1
        if progress is not None:
            progress(k + 1, len(todo), cfg["family"])
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore", restval="")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)
    return n


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


def run(
    out: Path,
    device: str = "cpu",
    seeds: Iterable[int] = SEEDS,
    limit: int | None = None,
    families: Iterable[str] | None = None,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
    interleave: bool = False,
    budget_s: float | None = None,
    shapes_from: Path | None = DEFAULT_CSV,
    resume: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
) -> int:
    """Measure the sweeps of ``seeds`` and write ``out``; returns the number of rows written.
    ``row_id`` identifies the config (seed and index in its sweep), so rows of runs on
    different devices join. ``resume`` keeps the rows already in ``out`` and measures only
    the configs it lacks.
    ``interleave`` takes the families in turn (a run cut short by ``limit`` or ``budget_s``
    still covers each); ``budget_s`` stops starting new configs after that many seconds.
    On CUDA, ``shapes_from`` (a CPU dataset) supplies the step's FLOPs and bytes for the
    configs it holds, so the GPU's time goes to measuring."""
    configs = configs_for(seeds)
    kept = _existing_rows(out) if resume else []
    done = {int(r["row_id"]) for r in kept}
    configs = [(i, c) for i, c in configs if i not in done]
    if families:
        fams = set(families)
        configs = [(i, c) for i, c in configs if c["family"] in fams]
    if interleave:
        configs = interleaved(configs)
    if limit:
        configs = configs[:limit]
    if device == "cuda":
        from predictor.generate import gpu

        gpu.require_cuda()
        shapes = cpu_shapes(shapes_from) if shapes_from else {}
        log(f"shape columns of {len(shapes)} configs reused from {shapes_from}")

        def measure_fn(i: int, cfg: dict[str, Any]) -> dict[str, Any]:
            return gpu.measure(cfg, shape=shapes.get(i))
    elif device == "cpu":
        import torch

        torch.set_num_threads(max(1, torch.get_num_threads()))

        def measure_fn(i: int, cfg: dict[str, Any]) -> dict[str, Any]:
            return measure_cpu(cfg)
    else:
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    n = 0
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore", restval="")
        w.writeheader()
        w.writerows(kept)
        if kept:
            log(f"resuming: {len(kept)} rows kept from {out}, {len(configs)} configs to measure")
        for k, (i, cfg) in enumerate(configs):
            if budget_s is not None and time.perf_counter() - t0 > budget_s:
                log(f"time budget of {budget_s:.0f}s spent: stopping after {n} rows")
                break
            try:
                m = measure_fn(i, cfg)
            except Exception as exc:  # a config that PyTorch rejects is skipped, not fatal
                log(f"[{i}] {cfg['family']}: skipped: {type(exc).__name__}: {exc}")
                continue
            gpu_model = m.get("gpu_model") or gpus.DEFAULT_GPU
            spec = spec_for(cfg, m, gpu_model)
            row = {k: m.get(k, "") for k in MEASURED}
            row.update(
                row_id=i, family=cfg["family"], job_class=features.job_class(spec),
                spec_json=msgspec.json.encode(spec).decode(),
                config_json=json.dumps(cfg, separators=(",", ":")), gpu_model=gpu_model,
            )
            w.writerow(row)
            fh.flush()
            n += 1
            log(f"[{k + 1}/{len(configs)} #{i}] {cfg['family']:9s} {m['exec_mode']:8s} "
                f"peak={m['peak_bytes'] / 2**20:10.1f} MiB flops={m['flops_step']:.3g} "
                f"{m['wall_s']:.2f}s total={time.perf_counter() - t0:.0f}s")
            if progress is not None:
                progress(k + 1, len(configs), cfg["family"])
    return n


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a dataset CSV as strings (no pandas)."""
    return _existing_rows(path)


def _existing_rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def cpu_shapes(path: Path) -> dict[int, dict[str, Any]]:
    """Shape columns of a CPU dataset's rows whose config is still the sweep's config."""
    out: dict[int, dict[str, Any]] = {}
    for row in _existing_rows(path):
        i = int(row["row_id"])
        cfg = config_of(i)
        if (row["label_source"] != "cpu" or cfg is None
                or row["config_json"] != json.dumps(cfg, separators=(",", ":"))
                or any(not row.get(k) for k in SHAPE_COLUMNS)):
            continue
        out[i] = {k: int(v) if v.lstrip("-").isdigit() else float(v)
                  for k in SHAPE_COLUMNS for v in [row[k]]}
    return out


def interleaved(configs: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
    """Round-robin over families, each family's configs in sweep order."""
    by_family: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for item in configs:
        by_family.setdefault(item[1]["family"], []).append(item)
    queues = list(by_family.values())
    out = []
    for rank in range(max((len(q) for q in queues), default=0)):
        out += [q[rank] for q in queues if rank < len(q)]
    return out


def load(path: Path = DEFAULT_CSV):  # noqa: ANN201 - pandas is imported lazily
    import pandas as pd

    return pd.read_csv(path, keep_default_na=False, na_values={
        c: [""] for c in MEASURED if c not in TEXT_COLUMNS
    })


def load_datasets(csv_path: Path, gpu_csv: Path | None):  # noqa: ANN201
    """(the CPU rows of ``csv_path``, the rows of ``gpu_csv`` or None when there is none)."""
    df = load(csv_path)
    gdf = load(gpu_csv) if gpu_csv is not None and gpu_csv.exists() else None
    df = df[df["label_source"] == "cpu"]
    if gdf is not None:
        gdf = with_cpu_specs(gdf, df)
    return df, gdf


def with_cpu_specs(gdf, df):  # noqa: ANN001, ANN201
    """GPU rows with the annotation of the CPU row of the same config (same ``row_id`` and
    config): the CPU dataset is re-measured more often than the GPU one, and the annotation
    (``describe``'s measured fields included) does not depend on where the step runs."""
    cpu = {(int(r), c): s for r, c, s in zip(df["row_id"], df["config_json"], df["spec_json"],
                                              strict=True)}
    out = gdf.copy()
    specs = []
    for r, c, s, gpu in zip(gdf["row_id"], gdf["config_json"], gdf["spec_json"],
                            gdf["gpu_model"], strict=True):
        src = cpu.get((int(r), c))
        if src is None:
            specs.append(s)
            continue
        spec = msgspec.structs.replace(schema.parse_model(src), gpu_model=str(gpu))
        specs.append(msgspec.json.encode(spec).decode())
    out["spec_json"] = specs
    return out


def gpu_labelled(gdf) -> bool:  # noqa: ANN001
    """Whether a GPU frame holds GPU-measured rows (the compute model then learns from them)."""
    return gdf is not None and bool((gdf["label_source"] == "gpu").any())


def specs(df) -> list[schema.ModelSpec]:  # noqa: ANN001
    """The rows' annotations, with the leaf modules' outputs per sample the tracer counted
    (``leaf_activations_per_sample``, what a model summary states) as ``leaf_activations``:
    the optional job field, read only at the job level."""
    out = [schema.parse_model(s) for s in df["spec_json"]]
    if "config_json" in df:  # how the optimizer steps, as the config built it
        impls = [json.loads(c).get("optimizer_impl") or "foreach" for c in df["config_json"]]
        out = [msgspec.structs.replace(s, optimizer_impl=i) if i != s.optimizer_impl else s
               for s, i in zip(out, impls, strict=True)]
    if "leaf_activations_per_sample" not in df:
        return out
    leaf = df["leaf_activations_per_sample"].to_numpy(dtype=float)
    return [msgspec.structs.replace(s, leaf_activations=float(v))
            if math.isfinite(v) and 0 < v <= 1e16 and not s.leaf_activations else s
            for s, v in zip(out, leaf, strict=True)]
