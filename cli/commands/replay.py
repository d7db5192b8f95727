"""``dressage-replay replay``: one setting of both staleness controls."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.flags import flagged
from cli.options import (
    FLAG,
    INT,
    BadRecordPolicy,
    BatchGroups,
    FieldOption,
    IncludeEval,
    Inputs,
    OnBadRecord,
    OrderBy,
    Quiet,
    Traceback,
    TrustPickle,
    one_keep_versions,
    one_max_preempts,
    reading,
)  # fmt: skip
from cli.output import print_json, report_dict, results_out, stdout_console, warn


def replay(
    inputs: Inputs,
    keep_versions: Annotated[
        int,
        typer.Option(
            "--keep-versions",
            "-k",
            help="K: keep groups from the K newest observed versions; 0 disables.",
            parser=one_keep_versions,
            metavar=INT,
        ),
    ] = 0,
    max_preempts: Annotated[
        str,
        typer.Option(
            "--max-preempts",
            "-m",
            help="M: a trajectory may span at most M+1 versions; 'none' disables.",
        ),
    ] = "none",
    batch_groups: BatchGroups = None,
    order_by: OrderBy = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the summary as one JSON object.", metavar=FLAG)
    ] = False,
    decisions: Annotated[
        Path | None,
        typer.Option(
            help="Write one row per group to a file: .csv, .parquet, .json, .jsonl or .arrow."
        ),
    ] = None,
    trajectories: Annotated[
        Path | None,
        typer.Option(
            help="Write one row per trajectory (trajectory_id, group_id, decision, stage, "
            "batch, version_gap, span) to a file: .csv, .parquet, .json, .jsonl or .arrow."
        ),
    ] = None,
    bias: Annotated[
        bool,
        typer.Option(
            "--bias",
            help="Also compare kept, dropped and rejected groups (who gets dropped).",
            metavar=FLAG,
        ),
    ] = False,
    field: FieldOption = None,
    on_bad_record: OnBadRecord = BadRecordPolicy.fail,
    trust_pickle: TrustPickle = False,
    include_eval: IncludeEval = False,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Replay both staleness controls for one setting and summarise what they would do.

    A Dressage run folder (traj_payload/, traj_err/, rollout_data/, dressage_log.txt) is
    replayed as Dressage's own collector loop runs (README: Your run's logs)."""
    config = analysis.ReplayConfig(
        keep_versions=keep_versions,
        max_preempts=one_max_preempts(max_preempts),
        batch_groups=batch_groups,
    )
    for output in (decisions, trajectories):  # before the log is read: a typo is told at once
        if output is not None:
            analysis.check_output(output, analysis.FRAME_FORMATS, inputs=inputs)
    if len(inputs) == 1 and analysis.is_run_folder(inputs[0]):
        replay_run_folder(inputs[0], config, json_output=json_output, trajectories=trajectories)
        return
    logs = reading(
        inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle,
        order_by=order_by, quiet=quiet, include_eval=include_eval,
    )  # fmt: skip
    table, prepared, report = logs.prepare(whole_table=bias)
    result = analysis.replay(prepared, config)
    if decisions is not None:
        analysis.write_decisions(result, decisions, inputs=inputs)
    if trajectories is not None:
        outcomes = analysis.trajectory_outcomes(prepared, result)
        analysis.write_frame_to(outcomes.select(TRAJECTORY_COLUMNS), trajectories, inputs=inputs)
        typer.echo(f"wrote {trajectories}", err=True)
    dropped = analysis.who_gets_dropped(prepared, result, table=table) if bias else None
    with results_out():
        if json_output:
            extra = {"bias": dropped.to_dict()} if dropped else {}
            print_json({**result.summary.to_dict(), **extra, **report_dict(report)})
        else:
            from cli.render import print_bias, print_summary

            print_summary(result.summary, stdout_console())
            if dropped is not None:
                print_bias(dropped, stdout_console())
    warn(report)


TRAJECTORY_COLUMNS = (
    "trajectory_id",
    "group_id",
    "decision",
    "stage",
    "batch",
    "version_gap",
    "span",
)
"""The columns of ``--trajectories``, for a log and a run folder alike."""


def replay_run_folder(
    folder: Path, config: analysis.ReplayConfig, *, json_output: bool, trajectories: Path | None
) -> None:
    """A run folder, replayed as Dressage's collector loop: K from ``config``; M and B are
    the run's own (its span rejections are on disk, its batch size in its log)."""
    run = analysis.read_run(folder)
    result = analysis.replay_run(run, keep_versions=config.keep_versions)
    if trajectories is not None:
        analysis.write_frame_to(
            result.trajectories.select(TRAJECTORY_COLUMNS), trajectories, inputs=[folder]
        )
        typer.echo(f"wrote {trajectories}", err=True)
    with results_out():
        if json_output:
            print_json(result.to_dict())
        else:
            from cli.render import print_run_summary

            print_run_summary(result, stdout_console())
    for warning in result.warnings:
        typer.echo(f"warning: {flagged(warning)}", err=True)
