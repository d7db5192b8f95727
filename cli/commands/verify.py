"""``dressage-replay verify``: replay a run folder at its own setting and check the replay
against what the run's own files say happened."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import analysis
from analysis import counted
from cli.flags import flagged
from cli.groups import RUN, RunFlags, takes_run_settings
from cli.options import FLAG, INT, LimitOption, Traceback, one_keep_versions, run_limits
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


@takes_run_settings()
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
    run: RunFlags = RUN,
    limit: LimitOption = None,
    traceback_: Traceback = False,
) -> None:
    """Check, step by step, that the replay reproduces what the run's own files say."""
    verified = analysis.verify_run(
        run_folder,
        keep_versions=keep_versions,
        max_retries=run.max_retries,
        limits=run_limits(limit),
        loop=run.loop,  # type: ignore[arg-type]
    )
    result = verified.result
    with results_out():
        if json_output:
            print_json(verified.to_dict())
        else:
            from cli.render_run import print_checks

            print_checks(result, stdout_console(), all_rows=all_checks)
    say_verdict(verified)
    for warning in (*verified.warnings, *result.warnings):
        typer.echo(f"warning: {flagged(warning)}", err=True)
    if not verified.consistent:
        raise typer.Exit(analysis.ExitCode.DISAGREES)


def say_verdict(verified: analysis.Verification) -> None:
    """The settings and the total, on stderr: whether the replay can be trusted for this run."""
    result, found = verified.result, list(verified.found)
    agree, total = verified.agree, result.checks.height
    words = result.max_retries_words
    retries = f"max_retries{words.replace(' ', '')}" if words[0] in "<>" else f"max_retries={words}"
    k = f"keep_versions={result.keep_versions}" + ("+" if verified.stands_for_more else "")
    typer.echo(
        f"loop={verified.loop}  {k}  max_preempts={verified.max_preempts_words}  {retries}: "
        f"the replay agrees with the run's own files on {agree:,} of {total:,} checks"
        + ("" if agree == total else f"; {total - agree:,} disagree"),
        err=True,
    )
    how = verified.keep_versions_from
    if not verified.given:
        how += "; " + counted(verified.tried, "setting") + " replayed"
        if verified.pruned:
            how += (
                ", " + counted(verified.pruned, "other K", "other K's") + " ruled out: each "
                "contradicts the metrics' cutoff index at more steps than the best replay has "
                "disagreements"
            )
    typer.echo(f"keep_versions: {how}", err=True)
    if verified.stands_for_more:
        typer.echo(
            f"note: keep_versions={result.keep_versions} or more: the run observed "
            f"{counted(len(result.versions), 'version')}, so every larger K replays alike",
            err=True,
        )
    typer.echo(f"loop: {result.loop_reason}", err=True)
    typer.echo(f"max_retries: {result.max_retries_how}", err=True)
    typer.echo(
        "max_preempts: "
        + (
            "as the run's span rejections name it"
            if verified.max_preempts
            else "no span rejection names it (M off, or nothing was rejected)"
        ),
        err=True,
    )
    if len(found) > 1:
        typer.echo(
            f"note: K = {', '.join(map(str, found))} agree alike; "
            + (
                "the one the metrics tell is shown"
                if verified.told is not None
                else "the smallest is shown"
            ),
            err=True,
        )
    for reason in verified.unexplained:
        typer.echo(f"note: disagreements may remain because {reason}", err=True)
