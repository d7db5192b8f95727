"""``dressage-replay compare``: two logs side by side."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

import analysis
from cli.options import (
    FLAG,
    INT,
    READ,
    BatchGroups,
    ReadFlags,
    one_keep_versions,
    one_max_preempts,
    own_batch_groups,
    reads_logs,
)  # fmt: skip
from cli.output import print_json, results_out, stdout_console, warn

if TYPE_CHECKING:
    import polars as pl


def run_names(names: str | None, first: Path, second: Path) -> tuple[str, str]:
    """The two runs' names: given, or the file names (A and B when those are the same)."""
    stems = (first.name.split(".")[0], second.name.split(".")[0])
    default = ",".join(stems) if stems[0] != stems[1] else "A,B"
    given = tuple(name.strip() for name in (names or default).split(","))
    if len(given) != 2 or given[0] == given[1]:
        raise typer.BadParameter(
            "expected two different names, e.g. baseline,controlled", param_hint="--names"
        )
    return given[0], given[1]


def train_sides(
    paths: list[Path], *, trust_pickle: bool, limits: analysis.Limits
) -> tuple[analysis.TrainDumps | None, analysis.TrainDumps | None]:
    """The train dumps of each log: the first --train-dumps is the first log's."""
    if len(paths) > 2:
        raise typer.BadParameter("give it at most twice, once per log", param_hint="--train-dumps")
    read = [
        analysis.read_train_dumps([path], trust_pickle=trust_pickle, limits=limits)
        for path in paths
    ]
    return (read[0] if read else None), (read[1] if len(read) > 1 else None)


@reads_logs()
def compare(
    first: Annotated[
        Path,
        typer.Argument(help="The first log (file or folder).", show_default=False, readable=False),
    ],
    second: Annotated[
        Path,
        typer.Argument(help="The second log (file or folder).", show_default=False, readable=False),
    ],
    keep_versions: Annotated[
        int,
        typer.Option(
            "--keep-versions",
            "-k",
            help="K applied to both logs.",
            parser=one_keep_versions,
            metavar=INT,
        ),
    ] = 0,
    max_preempts: Annotated[
        str, typer.Option("--max-preempts", "-m", help="M applied to both logs.")
    ] = "none",
    batch_groups: BatchGroups = None,
    names: Annotated[
        str | None,
        typer.Option(help="Names of the two runs, comma-separated (default: the file names)."),
    ] = None,
    plot_file: Annotated[
        Path | None, typer.Option("--plot", help="Also draw the comparison to this .png/.svg/.pdf.")
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the comparison as JSON.", metavar=FLAG)
    ] = False,
    train_dumps: Annotated[
        list[Path] | None,
        typer.Option(
            "--train-dumps",
            help="slime train-side dumps (train_data/) of the first log, then (given again) of "
            "the second: the trainer's log-probs, joined to the log on (rollout_id, index).",
            show_default=False,
        ),
    ] = None,
    read: ReadFlags = READ,
) -> None:
    """Two logs side by side: versions, gap and span distributions, losses, \
log-prob drift by gap."""
    config = analysis.ReplayConfig(
        keep_versions=keep_versions, max_preempts=one_max_preempts(max_preempts),
        batch_groups=batch_groups,
    )  # fmt: skip
    named = run_names(names, first, second)
    if plot_file is not None:  # before the logs are read: a typo is told at once
        analysis.check_output(
            plot_file, analysis.FIGURE_FORMATS, what="figure", inputs=[first, second]
        )
    readings = [read.reading([path]) for path in (first, second)]
    limits = readings[0].options.limits  # the train dumps are read within the same limits
    loaded = [logs.load() for logs in readings]
    (table_a, _), (table_b, _) = loaded
    config_a, config_b = (
        _own_config(config, path, table, report, limits)
        for path, (table, report) in zip((first, second), loaded, strict=True)
    )
    result = analysis.compare_logs(
        table_a, table_b, config_a=config_a, config_b=config_b, names=named,
        train_dumps=train_sides(train_dumps or [], trust_pickle=read.trust_pickle, limits=limits),
    )  # fmt: skip
    if plot_file is not None:
        analysis.save_figure(analysis.plot_compare(result), plot_file)
        typer.echo(f"wrote {plot_file}", err=True)  # as plot and report say
    with results_out():
        if json_output:
            print_json(result.to_dict())
        else:
            from cli.render import print_compare

            print_compare(result, stdout_console())
    for _, report in loaded:  # skipped records and warnings were dropped unsaid before
        warn(report)


def _own_config(
    config: analysis.ReplayConfig, path: Path, table: pl.DataFrame, report: analysis.LoadReport,
    limits: analysis.Limits,
) -> analysis.ReplayConfig:  # fmt: skip
    """One side's setting: B as given, else its trainer steps' or its run folder's own."""
    if config.batch_groups is not None:
        return config
    given = own_batch_groups([path], None, analysis.prepare(table), report, limits=limits)
    return analysis.ReplayConfig(
        keep_versions=config.keep_versions, max_preempts=config.max_preempts, batch_groups=given
    )
