"""`sparse-bench interference train|evaluate`: the learned pairwise interference model."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bench.commands.common import out_dir


@click.group()
def interference() -> None:
    """The learned pairwise interference model: train on measured pairs, score pair files."""


@interference.command("train")
@click.option("--out", default=None, help="folder for the model, pair tables and report "
              "(default results/interference-<time>)")
@click.option("--install", is_flag=True, help="also ship the result: the model to "
              "extender/interference/data/, the pair tables to bench/data/gavel/")
@click.option("--seed", default=0, show_default=True, help="held-out split and fold seed")
@click.option("--no-cv", is_flag=True, help="skip the cross-validation (faster)")
def interference_train(out, install, seed, no_cv) -> None:
    """Fit the pair model on Gavel's measured pairs; print train, held-out and CV scores."""
    import shutil

    from bench.interference.training import train

    folder = out_dir(out, "interference")
    report = train(folder, seed=seed, cv=not no_cv)
    for key in ("train", "heldout", "cv_unseen_pairs", "cv_unseen_family_pairs"):
        if key in report:
            r = report[key]
            click.echo(f"{key:24s} n={r['n']:5d}  R2={r['r2']:.3f}  MAE={r['mae']:.4f}")
    if install:
        root = Path(__file__).resolve().parents[2]  # the repository root
        shutil.copy(folder / "pair_model.json",
                    root / "extender" / "interference" / "data" / "pair_model.json")
        for name in ("gavel_pairs_train.csv", "gavel_pairs_heldout.csv", "report.json"):
            target = "pair_model_report.json" if name == "report.json" else name
            shutil.copy(folder / name, root / "bench" / "data" / "gavel" / target)
    click.echo(f"model: {folder / 'pair_model.json'}")


@interference.command("evaluate")
@click.option("--pairs", "pairs_path", required=True,
              type=click.Path(exists=True, dir_okay=False),
              help="CSV with a_gpu_util, a_mem_util, a_mem_mib, b_gpu_util, b_mem_util, "
              "b_mem_mib, a_speed (utilisations in %, measured solo)")
@click.option("--model", "model_path", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="model JSON (default: the shipped extender/interference/data/pair_model.json)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def interference_evaluate(pairs_path, model_path, as_json) -> None:
    """R2 and MAE of the model's predicted a_speed on a pair file."""
    from bench.interference.training import evaluate, read_pairs
    from extender.interference.pairmodel import PairModel, default_pair_model

    try:
        model = PairModel.load(model_path) if model_path else default_pair_model()
    except (OSError, ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise click.ClickException(f"{model_path}: not a pair model ({exc})") from None
    if model is None:
        raise click.ClickException("no shipped pair model; run `sparse-bench interference "
                                   "train --install` or pass --model")
    try:
        table = read_pairs(pairs_path)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    result = {"pairs": str(pairs_path), **evaluate(model, table)}
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(f"{pairs_path}: n={result['n']}  R2={result['r2']:.3f}  "
                   f"MAE={result['mae']:.4f}")
