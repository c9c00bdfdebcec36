"""``sparse-predictor``: generate the dataset, train, evaluate, predict, run the worker."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from predictor import MODEL_VERSION, dataset, estimate


def _gpu_data(ctx: click.Context, param: click.Parameter, value: str) -> Path | None:
    if value in ("", "none"):
        return None
    path = Path(value)
    if not path.exists():
        raise click.BadParameter(f"{path} does not exist (pass '' to use no GPU rows)")
    return path


GPU_DATA = click.option(
    "--gpu-data", default=str(dataset.DEFAULT_GPU_CSV), show_default=True, callback=_gpu_data,
    help="GPU-measured rows (generate --device cuda); '' for none.")


@click.group()
@click.version_option(package_name="sparse", prog_name="sparse-predictor")
def main() -> None:
    """GPU memory / compute-share predictor for training jobs (see docs/predictor.md)."""


@main.command()
@click.option("--out", type=click.Path(path_type=Path), default=dataset.DEFAULT_CSV,
              show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="cpu: CPU/FakeTensor measurements; cuda: GPU measurements (needs CUDA).")
@click.option("--seed", "seeds", multiple=True, type=int, default=dataset.SEEDS,
              show_default=True,
              help="Sweep seed; repeat for several sweeps (row_id = seed * 1000 + index).")
@click.option("--limit", type=int, default=None, help="Measure only the first N configs.")
@click.option("--family", "families", multiple=True, type=click.Choice(dataset.FAMILIES))
@click.option("--interleave", is_flag=True,
              help="Take the families in turn, so a run cut short still covers each.")
@click.option("--budget-s", type=float, default=None,
              help="Stop starting new configs after this many seconds (rows so far are kept).")
@click.option("--resume", is_flag=True,
              help="Keep the rows already in --out and measure only the configs it lacks.")
def generate(out: Path, device: str, seeds: tuple[int, ...], limit: int | None,
             families: tuple[str, ...], interleave: bool, budget_s: float | None,
             resume: bool) -> None:
    """Build real PyTorch models over the sweep and measure them (needs torch)."""
    try:
        n = dataset.run(out, device=device, seeds=seeds, limit=limit,
                        families=families or None, interleave=interleave, budget_s=budget_s,
                        resume=resume)
    except ImportError as exc:
        raise click.ClickException(
            f"generate needs torch: pip install 'sparse[torch]' ({exc})") from None
    except RuntimeError as exc:  # GpuUnavailable
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {n} rows to {out}")


@main.command()
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=dataset.DEFAULT_CSV,
              show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=estimate.MODELS_DIR,
              show_default=True)
@click.option("--version", default=MODEL_VERSION, show_default=True)
@click.option("--no-holdout", is_flag=True, help="Also train on the row_id % 10 == 0 slice.")
@GPU_DATA
def train(data: Path, out: Path, version: str, no_holdout: bool, gpu_data: Path | None) -> None:
    """Fit the memory (OLS) and compute (LightGBM) models and write artefacts."""
    from predictor import training

    manifest = training.train(data, out, version=version, use_holdout=not no_holdout,
                              gpu_csv=gpu_data)
    click.echo(json.dumps(manifest, indent=1))


@main.command()
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=dataset.DEFAULT_CSV,
              show_default=True)
@GPU_DATA
def evaluate(data: Path, gpu_data: Path | None) -> None:
    """Leave-one-family-out R², MAPE and largest under-estimate per held-out family."""
    from predictor import evaluation

    click.echo(evaluation.format_table(evaluation.evaluate(data, gpu_data)))


@main.command()
@click.option("--pod", "pod_file", type=click.Path(exists=True, path_type=Path),
              help="Pod manifest (YAML/JSON) carrying sparse.io/model or task_info.")
@click.option("--features", "features_file", type=click.Path(exists=True, path_type=Path),
              help="JSON file in the sparse.io/model schema.")
@click.option("--gpu-model", default=None, help="Override the target GPU model.")
@click.option("--models", "models_dir", type=click.Path(exists=True, path_type=Path),
              default=estimate.MODELS_DIR, show_default=True)
def predict(pod_file: Path | None, features_file: Path | None, gpu_model: str | None,
            models_dir: Path) -> None:
    """Predict gpu_milli / gpu_mem_mib / job_class for one job."""
    import msgspec
    import yaml

    from predictor import features

    if (pod_file is None) == (features_file is None):
        raise click.UsageError("give exactly one of --pod or --features")
    try:
        if pod_file is not None:
            pod = yaml.safe_load(pod_file.read_text())
            ann = ((pod or {}).get("metadata") or {}).get("annotations") or {}
            spec = features.from_annotations(ann)
            if spec is None:
                raise click.ClickException(
                    f"{pod_file}: no {features.ANN_MODEL} or {features.ANN_TASK_INFO} annotation")
        else:
            spec = features.parse_model(features_file.read_bytes())
        if gpu_model:
            spec = msgspec.structs.replace(spec, gpu_model=gpu_model)
            features.ModelSpec.__post_init__(spec)
    except (features.SchemaError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    p = estimate.Estimator.load(models_dir).predict(spec)
    click.echo(json.dumps({
        "gpu_milli": p.gpu_milli, "gpu_mem_mib": p.gpu_mem_mib, "job_class": p.job_class,
        "model_version": p.model_version, "gpu_model": p.gpu_model,
    }, indent=1))


@main.command()
@click.option("--kubeconfig", type=click.Path(path_type=Path), default=None,
              help="Kubeconfig file; in-cluster config when omitted.")
@click.option("--redis", "redis_url", default="redis://localhost:6379/0", show_default=True)
@click.option("--metrics-port", default=9108, show_default=True, type=int)
@click.option("--ttl", default=3600, show_default=True, type=int,
              help="Seconds a demand hash lives in Redis.")
@click.option("--namespace", default=None, help="Watch one namespace (default: all).")
@click.option("--models", "models_dir", type=click.Path(exists=True, path_type=Path),
              default=estimate.MODELS_DIR, show_default=True)
def worker(kubeconfig: Path | None, redis_url: str, metrics_port: int, ttl: int,
           namespace: str | None, models_dir: Path) -> None:
    """Watch unbound pods, predict, write sparse:demand:<uid> hashes to Redis."""
    import asyncio

    from predictor import worker as worker_mod

    try:
        asyncio.run(worker_mod.serve(
            kubeconfig=str(kubeconfig) if kubeconfig else None, redis_url=redis_url,
            metrics_port=metrics_port, ttl_s=ttl, namespace=namespace, models_dir=models_dir,
        ))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
