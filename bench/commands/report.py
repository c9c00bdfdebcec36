"""`sparse-bench report`: rebuild a report from earlier runs."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--out", required=True, help="folder for the merged report")
@click.option("--command", "commands", multiple=True,
              help="rec-mix: a command that made the sources, listed in the report")
@click.option("--note", default="", help="rec-mix: a paragraph put under the header")
def report(sources, out, commands, note) -> None:
    """Rebuild an `fgd` or `replay -w rec-mix` report from the runs.jsonl of result folders
    (or, for `fgd`, from a written report's runs.csv and curves.json; earlier sources win)."""
    from bench.sim.fgd import FgdRun
    from bench.sim.report import runs_from_report, write_fgd

    docs = []
    for src in sources:
        path = Path(src)
        if path.is_dir() and not (path / "runs.jsonl").exists():  # a kept report folder
            docs += [r.to_json() for r in runs_from_report(path)]
            continue
        path = path / "runs.jsonl" if path.is_dir() else path
        docs += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if docs and all("sm_util_mean" in d for d in docs):
        from bench.sim.recmix_replay import RecMixRun
        from bench.sim.recmix_report import write_recmix

        unique = {(d["mode"], d["policy"], d["seed"]): d for d in docs}
        runs = [RecMixRun(**d) for d in unique.values()]
        click.echo(f"report: {write_recmix(runs, Path(out), '`; `'.join(commands), note)}")
        return
    runs, seen = [], set()
    for doc in docs:
        run = FgdRun.from_json(doc)
        key = (run.workload, run.policy, run.seed, run.tune)
        if key not in seen:
            seen.add(key)
            runs.append(run)
    click.echo(f"report: {write_fgd(runs, Path(out))}")
