"""The measured dataset: runner and CSV I/O.

``configs.sweep(seed)`` lists model configs (plain dicts); ``run(...)`` measures each with
``generate.measure`` (CPU) or ``generate.gpu`` (CUDA) and writes one CSV row per config with the
:class:`~predictor.schema.ModelSpec` JSON a user would put in ``sparse.io/model`` plus the
measured columns. Reading the CSV (``load``) needs only pandas; torch is imported lazily by
``run``.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec

# ``name as name``: re-exported, the tests read the sweep here
from predictor import features, gpus, schema
from predictor.configs import FAMILIES as FAMILIES
from predictor.configs import NEW_FAMILIES, REC_FAMILIES, SEEDS, config_of, configs_for
from predictor.configs import sweep as sweep

DATA_DIR = Path(__file__).parent / "data"
DEFAULT_CSV = DATA_DIR / "dataset-cpu-v1.csv"
# GPU-measured rows of the same configs (``generate --device cuda``), one file per GPU model
DEFAULT_GPU_CSV = DATA_DIR / "dataset-gpu-h200.csv"
# where generate / train / evaluate write unless told otherwise (never the source tree)
RESULTS_DIR = Path("results") / "predictor"

# Configs cheaper than this are re-run with real tensors; the real run's numbers are kept and
# the fake/real agreement is recorded in ``fake_real_rel_diff``.
REAL_MAX_FLOPS = 1.5e9
REAL_MAX_BYTES = 768 * 2**20

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
        "grad_bytes": float(m["grad_bytes"]),
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
