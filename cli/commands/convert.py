"""``dressage-replay convert``: logs to the canonical table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.groups import READ, ReadFlags, reads_logs
from cli.options import (
    Force,
    Inputs,
    whole_option,
)  # fmt: skip
from cli.output import progress_bar, refuse_existing, replacing, warn


@reads_logs(placed={"workers": "include_eval", "ray": "workers"})
def convert(
    inputs: Inputs,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="Output file: .parquet (or .arrow) in the canonical layout; or a "
            "folder (a name without an extension) of Parquet parts, written by --workers "
            "local processes or --ray tasks.",
        ),
    ],
    order_by: Annotated[
        str | None,
        typer.Option(
            help="Keep this field as a column, so that a replay of the output can order "
            "group arrival by it (--order-by); rows stay in input order.",
            metavar="FIELD",
        ),
    ] = None,
    force: Force = False,
    read: ReadFlags = READ,
    workers: Annotated[
        int | None,
        whole_option(
            "A folder output (no extension): parts written by this many local processes "
            "(default: every core); with --ray local, the CPUs of that Ray."
        ),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="A folder output: run its parts as Ray tasks on the cluster at this address "
            "(auto: the one this machine is in; local: a Ray started here). Needs the ray "
            "extra.",
            metavar="ADDRESS",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Write the canonical table (one row per record) so big logs load fast next time.

    With an output path without an extension, the table is written as a folder of Parquet
    parts that every command reads as one log, by the local cores or, with --ray, a Ray
    cluster (docs: Many runs, big logs)."""
    logs = read.reading(inputs, order_by=order_by)
    quiet = read.quiet
    analysis.refuse_overwriting_inputs(output, inputs)
    refuse_existing(output, force=force)
    if not output.suffix:
        with replacing(output, force=force):
            _convert_partitioned(
                inputs, output, logs.options, workers=workers, ray=ray, quiet=quiet
            )
        return
    if ray is not None or workers is not None:
        flag = "--ray" if ray is not None else "--workers"
        raise typer.BadParameter(
            f"writes a folder of parts: give an output without an extension (not {output.name})",
            param_hint=flag,
        )
    report = analysis.LoadReport()
    with progress_bar("converting", quiet=quiet) as update:
        rows = analysis.convert_logs(inputs, output, logs.options, report=report, progress=update)
    typer.echo(f"wrote {rows:,} records to {output}", err=True)
    report.warnings = analysis.converted_warnings(report.warnings, report.formats)
    warn(report, verbose=read.verbose)


def _convert_partitioned(
    inputs: list[Path], output: Path, options: analysis.ReadOptions, *, workers: int | None,
    ray: str | None, quiet: bool,
) -> None:  # fmt: skip
    if ray is not None:
        if workers is not None and ray != analysis.RAY_LOCAL:
            raise typer.BadParameter(
                f"sets the CPUs of a Ray started here (--ray {analysis.RAY_LOCAL}); the cluster at "
                f"{ray} has its own",
                param_hint="--workers",
            )

        runner = analysis.run_ray(ray, num_cpus=workers)
    else:
        runner = analysis.run_local(workers)
    with progress_bar("converting (parts)", quiet=quiet) as update:
        done = analysis.convert_partitioned(inputs, output, options, runner=runner, progress=update)
    typer.echo(
        f"wrote {done.rows:,} records to {output}/ ({done.parts:,} "
        f"part{'' if done.parts == 1 else 's'}, {done.workers})",
        err=True,
    )
    report = analysis.LoadReport(
        warnings=analysis.converted_warnings(done.warnings, done.formats),
        skipped_where=done.skipped_where,
    )
    report.skipped.update(done.skipped)
    warn(report)
