"""``dressage-replay verify``: replay a run folder at its own setting and check the replay
against what the run's own files say happened."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.flags import flagged
from cli.options import (
    FLAG,
    INT,
    LimitOption,
    LoopOption,
    Traceback,
    one_keep_versions,
    run_limits,
)
from cli.output import print_json, results_out, stdout_console

RunFolder = Annotated[
    Path,
    typer.Argument(
        help="A Dressage run folder (traj_payload/, traj_err/, rollout_data/, "
        "dressage_log.txt, dressage_metrics.jsonl).",
        show_default=False,
        metavar="RUN",
    ),
]


def verify(
    run_folder: RunFolder,
    keep_versions: Annotated[
        int | None,
        typer.Option(
            "--keep-versions",
            "-k",
            help="K the run was made with (default: found as the K whose replay agrees).",
            parser=one_keep_versions,
            metavar=INT,
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the checks as one JSON object.", metavar=FLAG)
    ] = False,
    all_checks: Annotated[
        bool, typer.Option("--all", help="List every check, not only disagreements.", metavar=FLAG)
    ] = False,
    loop: LoopOption = None,
    limit: LimitOption = None,
    traceback_: Traceback = False,
) -> None:
    """Check, step by step, that the replay reproduces what the run's own files say."""
    verified = analysis.verify_run(
        run_folder,
        keep_versions=keep_versions,
        limits=run_limits(limit),
        loop=loop,  # type: ignore[arg-type]
    )
    result = verified.result
    with results_out():
        if json_output:
            print_json(verified.to_dict())
        else:
            from cli.render_run import print_checks

            print_checks(result, stdout_console(), all_rows=all_checks)
    say_verdict(result, list(verified.found), given=verified.given)
    for warning in result.warnings:
        typer.echo(f"warning: {flagged(warning)}", err=True)
    if not verified.consistent:
        raise typer.Exit(analysis.ExitCode.DISAGREES)


def say_verdict(result: analysis.LoopReplay, found: list[int], *, given: bool) -> None:
    """The total, on stderr: whether the replay can be trusted for this run."""
    agree, total = int(result.checks["agrees"].sum()), result.checks.height
    how = (
        "as given"
        if given
        else "found"
        if found
        else "no K reproduces the run: each from 0 to its versions + 1 was tried; shown at 0"
    )
    typer.echo(
        f"{result.loop} loop ({result.loop_reason}), "
        f"keep_versions={result.keep_versions} ({how}): the replay agrees with the run's own "
        f"files on {agree:,} of {total:,} checks"
        + ("" if agree == total else f"; {total - agree:,} disagree"),
        err=True,
    )
    if len(found) > 1:
        typer.echo(
            f"note: K = {', '.join(map(str, found))} all reproduce the run; the smallest is used",
            err=True,
        )
