"""`sparse-bench variants`: pod lists derived from default as the upstream variants are."""

from __future__ import annotations

import click

from bench.commands.common import out_dir


@click.command()
@click.option("--variant", "-v", "names", multiple=True, required=True,
              help="gpushareNN, multigpuNN, gpuspecNN or cpuNNN; repeatable")
@click.option("--seed", default=0, show_default=True, help="the generator's seed")
@click.option("--compare", "-c", "shipped", multiple=True,
              help="also generate this shipped list's name and print both summaries")
@click.option("--out", default=None, help="folder for the CSVs (default results/variants-<time>)")
def variants(names, seed, shipped, out) -> None:
    """Pod lists derived from default as the upstream variants are (bench/sim/variants.py);
    run them with ``sparse-bench fgd -w <folder>/openb_pod_list_gen-<name>.csv``."""
    import pandas as pd

    from bench.sim import variants as va
    from bench.sim.report import md_table
    from bench.sim.trace import load_pods, workload_path

    folder = out_dir(out, "variants")
    rows = []
    for name in shipped:
        rows.append({"list": f"{name} (shipped)", **va.summary(load_pods(workload_path(name)))})
        rows.append({"list": f"{name} (generated)", **va.summary(va.generate(name, seed))})
    for name in names:
        path = va.write(name, folder, seed)
        rows.append({"list": f"gen-{name}", **va.summary(load_pods(path))})
        click.echo(f"wrote {path}")
    table = md_table(pd.DataFrame(rows), floatfmt="{:.3f}")
    (folder / "summary.md").write_text(table + "\n")
    click.echo(table)
