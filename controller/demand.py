"""Steps of a pass that put the job's predicted demand and its queue band in its status, once
per job (the status keeps them; later passes read them back)."""

from __future__ import annotations

from typing import Any

from controller import status as st
from controller.context import PassContext
from controller.lifecycle import finish
from controller.pods import whole_gpus
from controller.prediction import Demand, InvalidModel, data_parallel, predict
from extender.queueorder import predicted_duration


def record_demand(ctx: PassContext) -> Demand | None:
    """The per-worker demand: from the status, else predicted and recorded; None when the model
    is invalid (the job has then failed)."""
    s = ctx.status
    d = s.get("demand")
    if d and d.get("modelVersion"):
        return Demand(int(d["gpuMemMiB"]), int(d["gpuMilli"]), d.get("jobClass", "unknown"),
                      d["modelVersion"], float(d.get("stepSeconds") or 0.0))
    try:
        demand = predict(ctx.spec)
        whole = whole_gpus(ctx.spec.get("template") or {})
    except (InvalidModel, ValueError) as exc:
        s["conditions"] = st.set_condition(s.get("conditions"), "Predicted", False,
                                           "InvalidModel", str(exc), ctx.now)
        finish(ctx, st.FAILED, "InvalidModel", f"cannot predict the demand: {exc}")
        return None
    s["demand"] = demand.as_status(whole)
    what = (f"{whole} whole GPU(s)" if whole else
            f"{demand.gpu_mem_mib} MiB and {demand.gpu_milli} milli of one GPU")
    if not whole:  # what a worker holds besides the model trained alone
        holds = []
        if sharding := ctx.spec.get("embeddingSharding"):
            holds.append(f"its {sharding} shard of the tables")
        if data_parallel(ctx.spec)[0]:
            holds.append("DistributedDataParallel's gradient buckets")
        if holds:
            what += f" (with {' and '.join(holds)})"
    message = (f"each of {ctx.replicas} workers needs {what} (class {demand.job_class},"
               f" model {demand.model_version})")
    s["conditions"] = st.set_condition(s.get("conditions"), "Predicted", True, "Predicted",
                                       message, ctx.now)
    ctx.events.append(("Normal", "Predicted", message))
    return demand


def record_queue_band(ctx: PassContext, demand: Demand) -> None:
    """Once per job: its band from the declared ``spec.steps`` x the predicted step time
    (the default band when either is missing or bad), kept in the status and posted."""
    bands, s = ctx.config.bands, ctx.status
    if bands is None or s.get("queueBand"):
        return
    steps = ctx.spec.get("steps")
    bad = ""
    try:
        seconds = predicted_duration(steps, demand.step_s or None)
    except ValueError as exc:
        seconds, bad = None, str(exc)
    band = bands.band(seconds)
    # whole GPUs the job needs at once: a long gang goes ahead of every band
    gang = (int((s.get("demand") or {}).get("wholeGpus") or 0) * ctx.replicas
            if seconds is not None else 0)
    name, priority = bands.queue_class(band, gang)
    entry: dict[str, Any] = {"name": name, "band": band, "priority": priority}
    if seconds is not None:
        entry["predictedSeconds"] = round(seconds)
        if bands.order == "latest-start":  # how far it may really run, and its expected run
            entry.update(error_margins(ctx.spec.get("family"), demand.job_class))
            if bands.is_critical_gang(band, gang):  # its place while the gangs hold their share
                entry["bandPriority"] = bands.priority(band)
        why = (f"predicted {seconds / 3600:.2f} h = {steps} steps x"
               f" {demand.step_s:.3g} s per step")
        if bands.is_critical_gang(band, gang):
            why += f"; a gang of {gang} whole GPUs in a critical band goes first"
    elif bad:
        why = f"default band: {bad}"
    elif steps is None:
        why = "default band: the job declares no spec.steps"
    else:
        why = "default band: no predicted step time"
    s["queueBand"] = entry
    ctx.events.append(("Warning" if bad else "Normal", "QueueBand",
                       f"queue band {entry['name']} ({bands.describe(band)}, priority"
                       f" {entry['priority']}, {bands.order}): {why}"))


def error_margins(family: str | None, job_class: str) -> dict[str, float]:
    """The latest-start rule's margins of a job: its family's (else job class's, else all
    rows') bound of the step-time under-estimate and median error (predictor/step_bounds.py,
    shipped with the predictor's models)."""
    from predictor import step_bounds

    return {"errorBound": step_bounds.load().margin(family, job_class),
            "medianError": step_bounds.load_median().margin(family, job_class)}
