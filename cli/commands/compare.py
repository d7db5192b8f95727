"""``dressage-replay compare``: two logs side by side."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.groups import READ, ReadFlags, reads_logs
from cli.options import (
    FLAG,
    BatchGroups,
    Force,
    one_keep_versions,
    one_max_preempts,
)  # fmt: skip
from cli.output import (
    print_json,
    progress_bar,
    refuse_existing,
    results_out,
    say_note,
    stdout_console,
    warn,
)


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


@reads_logs()
def compare(
    first: Annotated[
        Path,
        typer.Argument(
            help="The first log (file or folder).",
            show_default=False,
            readable=False,
            metavar="FIRST",
        ),
    ],
    second: Annotated[
        Path,
        typer.Argument(
            help="The second log (file or folder).",
            show_default=False,
            readable=False,
            metavar="SECOND",
        ),
    ],
    keep_versions: Annotated[
        int,
        typer.Option(
            "--keep-versions",
            "-k",
            help="K applied to both logs.",
            parser=one_keep_versions,
            metavar="<int|off>",
        ),
    ] = 0,
    max_preempts: Annotated[
        str,
        typer.Option("--max-preempts", "-m", help="M applied to both logs.", metavar="<int|none>"),
    ] = "none",
    batch_groups: BatchGroups = None,
    names: Annotated[
        str | None,
        typer.Option(
            help="Names of the two runs, comma-separated (default: the file names).",
            metavar="NAME,NAME",
        ),
    ] = None,
    plot_file: Annotated[
        Path | None, typer.Option("--plot", help="Also draw the comparison to this .png/.svg/.pdf.")
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the comparison as JSON.", metavar=FLAG)
    ] = False,
    force: Force = False,
    train_dumps: Annotated[
        list[Path] | None,
        typer.Option(
            "--train-dumps",
            help="slime train-side dumps (train_data/) of the first log, then (given again) of "
            "the second: the trainer's log-probs, joined to the log on (rollout_id, index).",
            show_default=False,
            metavar="FOLDER",
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
        refuse_existing(plot_file, force=force)
    if len(train_dumps or []) > 2:
        raise typer.BadParameter("give it at most twice, once per log", param_hint="--train-dumps")
    compared = analysis.compare_inputs(
        first, second, config, names=named, train_dumps=train_dumps or [], options=read.options(),
        progress=functools.partial(progress_bar, quiet=read.quiet), note=say_note,
    )  # fmt: skip
    result = compared.result
    if plot_file is not None:
        analysis.save_figure(analysis.plot_compare(result), plot_file, inputs=[first, second])
        typer.echo(f"wrote {plot_file}", err=True)  # as plot and report say
    with results_out():
        if json_output:
            print_json(result.to_dict())
        else:
            from cli.render import print_compare

            print_compare(result, stdout_console())
    for report in compared.reports:  # skipped records and warnings were dropped unsaid before
        warn(report, verbose=read.verbose)
