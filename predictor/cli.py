"""``sparse-predictor``: generate the dataset, train, evaluate, describe, predict, run the
worker. Outputs go under ``results/predictor/`` unless ``--out`` says otherwise; shipping
retrained models is an explicit ``train --out predictor/models``."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import click

from predictor import MODEL_VERSION, configs, dataset, estimate, schema


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


@contextlib.contextmanager
def _steps(what: str) -> Iterator:
    """A rich spinner on stderr naming the current step of a long command."""
    from rich.console import Console

    console = Console(stderr=True)
    with console.status(what) as status:
        yield lambda text: status.update(f"{what}: {text}")


@click.group()
@click.version_option(package_name="sparse", prog_name="sparse-predictor")
def main() -> None:
    """GPU memory / compute-share predictor for training jobs (see docs/predictor.md)."""


@main.command()
@click.option("--out", type=click.Path(path_type=Path),
              default=dataset.RESULTS_DIR / dataset.DEFAULT_CSV.name, show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="cpu: CPU/FakeTensor measurements; cuda: GPU measurements (needs CUDA).")
@click.option("--seed", "seeds", multiple=True, type=int, default=configs.SEEDS,
              show_default=True,
              help="Sweep seed; repeat for several sweeps (row_id = seed * 1000 + index).")
@click.option("--limit", type=int, default=None, help="Measure only the first N configs.")
@click.option("--family", "families", multiple=True, type=click.Choice(configs.FAMILIES))
@click.option("--interleave", is_flag=True,
              help="Take the families in turn, so a run cut short still covers each.")
@click.option("--budget-s", type=float, default=None,
              help="Stop starting new configs after this many seconds (rows so far are kept).")
@click.option("--resume", is_flag=True,
              help="Keep the rows already in --out and measure only the configs it lacks.")
@click.option("--quiet", is_flag=True, help="No per-row log lines (the progress bar stays).")
@click.option("--fill-replay", "fill_rows_of", type=click.Path(path_type=Path), default=None,
              help="Instead of measuring: trace again the CPU rows of --out that lack the "
                   "caching-allocator replay (cuda_reserved_bytes) and fill it; only the "
                   "row_ids of this CSV (e.g. a GPU dataset), or 'all'.")
def generate(out: Path, device: str, seeds: tuple[int, ...], limit: int | None,
             families: tuple[str, ...], interleave: bool, budget_s: float | None,
             resume: bool, quiet: bool, fill_rows_of: Path | None) -> None:
    """Build real PyTorch models over the sweep and measure them (needs torch)."""
    if fill_rows_of is not None:
        _fill_replay(out, fill_rows_of)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeRemainingColumn(), transient=True) as bar:
        task = bar.add_task("measuring", total=None)

        def progress(done: int, total: int, family: str) -> None:
            bar.update(task, completed=done, total=total, description=f"measuring {family}")

        def log(line: str) -> None:
            if not quiet:
                bar.console.print(line, markup=False, highlight=False)

        try:
            n = dataset.run(out, device=device, seeds=seeds, limit=limit,
                            families=families or None, interleave=interleave,
                            budget_s=budget_s, resume=resume, progress=progress, log=log)
        except ImportError as exc:
            raise click.ClickException(
                f"generate needs torch: pip install 'sparse[torch]' ({exc})") from None
        except RuntimeError as exc:  # GpuUnavailable
            raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {n} rows to {out}")


def _fill_replay(out: Path, rows_of: Path) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    if not out.exists():
        raise click.ClickException(f"{out} does not exist")
    ids = None
    if str(rows_of) != "all":
        if not rows_of.exists():
            raise click.ClickException(f"{rows_of} does not exist (or pass 'all')")
        ids = [int(r["row_id"]) for r in dataset.read_rows(rows_of)]
    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeRemainingColumn(), transient=True) as bar:
        task = bar.add_task("replaying", total=None)
        n = dataset.fill_replay(
            out, ids, log=lambda line: bar.console.print(line, markup=False),
            progress=lambda d, t, f: bar.update(task, completed=d, total=t,
                                                description=f"replaying {f}"))
    click.echo(f"filled the allocator replay of {n} rows in {out}")


@main.command()
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=dataset.DEFAULT_CSV,
              show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=dataset.RESULTS_DIR / "models",
              show_default=True, help="Artefact folder; 'predictor/models' ships them.")
@click.option("--version", default=MODEL_VERSION, show_default=True)
@click.option("--no-holdout", is_flag=True, help="Also train on the row_id % 10 == 0 slice.")
@GPU_DATA
def train(data: Path, out: Path, version: str, no_holdout: bool, gpu_data: Path | None) -> None:
    """Fit the memory (OLS, both input levels) and compute (LightGBM) models."""
    from predictor import training

    with _steps("training") as step:
        manifest = training.train(data, out, version=version, use_holdout=not no_holdout,
                                  gpu_csv=gpu_data, step=step)
    click.echo(json.dumps(manifest, indent=1))
    click.echo(f"models written to {out}", err=True)


@main.command()
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=dataset.DEFAULT_CSV,
              show_default=True)
@GPU_DATA
@click.option("--out", type=click.Path(path_type=Path), default=dataset.RESULTS_DIR,
              show_default=True, help="Folder for the tables (evaluation.txt) and the plots.")
@click.option("--skip-compute", is_flag=True, help="Memory tables only (no LightGBM fits).")
def evaluate(data: Path, gpu_data: Path | None, out: Path, skip_compute: bool) -> None:
    """Leave-one-family-out tables at both input levels (described, job fields) and a
    predicted-vs-measured log-log plot per level."""
    from predictor import evaluation, evaluation_report, evaluation_sharded

    with _steps("evaluating") as step:
        ev = evaluation.evaluate(data, gpu_data, compute=not skip_compute, step=step)
        step("plots")
        plots = evaluation_report.plot(ev, out)
    table = evaluation_report.format_table(ev)
    sharded = evaluation_sharded.points(evaluation_sharded.load())
    table += "\n\n" + evaluation_sharded.format_sharded(
        evaluation_sharded.evaluate_sharded(sharded))
    plots.append(evaluation_sharded.plot_sharded(sharded, out))
    click.echo(table)
    (out / "evaluation.txt").write_text(table + "\n")
    for p in plots:
        click.echo(f"plot: {p}")


@main.command("step-bounds")
@GPU_DATA
@click.option("--quantile", default=0.9, show_default=True, type=click.FloatRange(0, 1,
              min_open=True, max_open=True),
              help="Upper quantile of measured / predicted step time per family.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=dataset.RESULTS_DIR / "models", show_default=True,
              help="Folder for step-error-bounds.json; 'predictor/models' ships it.")
def step_bounds(gpu_data: Path | None, quantile: float, out: Path) -> None:
    """Per-family bounds of the step-time estimate's under-estimate, from the GPU rows (the
    job controller promotes a job by its family's bound)."""
    from predictor import step_bounds as bounds

    if gpu_data is None:
        raise click.ClickException("step-bounds needs the GPU-measured rows (--gpu-data)")
    out.mkdir(parents=True, exist_ok=True)
    path = bounds.write(out, quantile, gpu_data)
    click.echo(path.read_text().rstrip())
    click.echo(f"written to {path}", err=True)


@main.command()
@click.argument("target", metavar="MODULE:FACTORY")
@click.option("--family", default=None, help="Override the family guessed from the layers.")
@click.option("--gpu-model", default=None, help="Target GPU model written into the annotation.")
@click.option("--autocast", type=click.Choice(["bf16", "fp16"]), default=None,
              help="The job trains with mixed precision (torch.autocast to this dtype).")
@click.option("--data-parallel-workers", type=click.IntRange(0), default=None,
              help="The job's workers sync gradients with DistributedDataParallel, this many"
                   " (0: they do not; default: the process group's size when the factory's"
                   " model is wrapped in DDP, else unsaid).")
@click.option("--embedding-sharding", type=click.Choice(get_args(schema.EmbeddingSharding)),
              default=None, help="The tables are sharded over the data-parallel workers by"
                                 " TorchRec (needs --data-parallel-workers).")
@click.option("--indent", is_flag=True, help="Pretty-print.")
def describe(target: str, family: str | None, gpu_model: str | None, autocast: str | None,
             data_parallel_workers: int | None, embedding_sharding: str | None,
             indent: bool) -> None:
    """Print the sparse.io/model annotation of a PyTorch model: FACTORY() returns
    (model, example_inputs, optimizer[, loss_fn]); one training step is traced under
    FakeTensorMode on the CPU (needs torch)."""
    sys.path.insert(0, str(Path.cwd()))
    try:
        from predictor import describe as describe_mod
    except ImportError as exc:
        raise click.ClickException(f"describe needs torch: pip install torch ({exc})") from None
    try:
        ann = describe_mod.describe_factory(target, family=family, gpu_model=gpu_model,
                                            autocast=autocast,
                                            data_parallel_workers=data_parallel_workers,
                                            embedding_sharding=embedding_sharding)
    except (describe_mod.DescribeError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(ann, indent=1 if indent else None))


@main.command("validate-tracer")
@click.argument("targets", nargs=-1, metavar="[MODULE:FACTORY]...")
@click.option("--batch", default=512, show_default=True, type=click.IntRange(1),
              help="Batch of the built-in architectures (a factory brings its own).")
@click.option("--autocast", type=click.Choice(["bf16", "fp16"]), default=None,
              help="Trace under mixed precision (torch.autocast to this dtype).")
def validate_tracer(targets: tuple[str, ...], batch: int, autocast: str | None) -> None:
    """describe against a real CPU step of the same model: the tracer's peak and the CPU
    allocator's. Without targets: eleven recommendation architectures outside the training
    families (predictor/generate/outside.py). Needs torch and the memory of a real step."""
    sys.path.insert(0, str(Path.cwd()))
    try:
        from predictor import describe as describing
        from predictor import validate
        from predictor.generate import outside
    except ImportError as exc:
        raise click.ClickException(f"validate-tracer needs torch: pip install torch ({exc})"
                                   ) from None
    cases = ({t: (lambda t=t: describing.load_factory(t)()) for t in targets} if targets
             else {name: (lambda f=f: f(batch)) for name, f in outside.ARCHITECTURES.items()})
    est = estimate.Estimator.load()
    click.echo(f"{'model':<24} {'describe':>9} {'traced':>9} {'allocator':>9} {'describe':>9}"
               f" {'job':>9} {'job':>8}")
    click.echo(f"{'':<24} {'MiB':>9} {'MiB':>9} {'MiB':>9} {'vs alloc':>9} {'MiB':>9}"
               f" {'vs alloc':>8}")
    failed = 0
    for name, factory in cases.items():
        try:
            parts = describing.factory_parts(factory(), name)
            c = validate.check(*parts, autocast=autocast, estimator=est)
        except (describing.DescribeError, ValueError, TypeError, RuntimeError) as exc:
            failed += 1  # (RuntimeError: what the user's model raised in its step)
            click.echo(f"{name:<24} failed: {exc}")
            continue
        click.echo(f"{name:<24} {c.train_mib:>9.1f} {c.traced_mib:>9.1f} {c.allocator_mib:>9.1f}"
                   f" {100 * c.error(c.train_mib):>+8.1f}% {c.job_mib:>9.1f}"
                   f" {100 * c.error(c.job_mib):>+7.1f}%")
    if failed:
        raise click.ClickException(f"{failed} of {len(cases)} could not be checked")


@main.command()
@click.option("--pod", "pod_file", type=click.Path(exists=True, path_type=Path),
              help="Pod manifest (YAML/JSON) carrying sparse.io/model or task_info.")
@click.option("--features", "features_file", type=click.Path(exists=True, path_type=Path),
              help="JSON file: a sparse.io/model annotation (either schema).")
@click.option("--gpu-model", default=None, help="Override the target GPU model.")
@click.option("--models", "models_dir", type=click.Path(exists=True, path_type=Path),
              default=estimate.MODELS_DIR, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on one line.")
def predict(pod_file: Path | None, features_file: Path | None, gpu_model: str | None,
            models_dir: Path, as_json: bool) -> None:
    """Predict train_mib / gpu_mem_mib / gpu_milli / job_class for one job."""
    import msgspec
    import yaml

    if (pod_file is None) == (features_file is None):
        raise click.UsageError("give exactly one of --pod or --features")
    try:
        if pod_file is not None:
            from predictor.worker import pod_spec

            pod = yaml.safe_load(pod_file.read_text())
            if not isinstance(pod, dict):
                raise click.ClickException(f"{pod_file}: not a pod manifest")
            spec = pod_spec(pod)  # as the prediction worker reads it
            if spec is None:
                raise click.ClickException(
                    f"{pod_file}: no {schema.ANN_MODEL} or {schema.ANN_TASK_INFO} annotation")
        else:
            spec = schema.parse_model(features_file.read_bytes())
        if gpu_model:
            spec = msgspec.structs.replace(spec, gpu_model=gpu_model)
            schema.ModelSpec.__post_init__(spec)
    except (schema.SchemaError, ValueError, yaml.YAMLError) as exc:
        raise click.ClickException(str(exc)) from None
    try:
        p = estimate.Estimator.load(models_dir).predict(spec)
    except (OSError, ValueError, KeyError) as exc:
        raise click.ClickException(f"cannot load the models in {models_dir}: {exc}") from None
    click.echo(json.dumps(p.to_dict(), indent=None if as_json else 1))


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
