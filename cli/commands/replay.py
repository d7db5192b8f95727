"""``dressage-replay replay``: one setting of both staleness controls."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.options import (
    FLAG,
    INT,
    BadRecordPolicy,
    BatchGroups,
    FieldOption,
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
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Replay both staleness controls for one setting and summarise what they would do."""
    config = analysis.ReplayConfig(
        keep_versions=keep_versions,
        max_preempts=one_max_preempts(max_preempts),
        batch_groups=batch_groups,
    )
    if decisions is not None:  # before the log is read: a typo is told at once
        analysis.check_output(decisions, analysis.FRAME_FORMATS, inputs=inputs)
    logs = reading(
        inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle,
        order_by=order_by, quiet=quiet,
    )  # fmt: skip
    table, prepared, report = logs.prepare(whole_table=bias)
    result = analysis.replay(prepared, config)
    if decisions is not None:
        analysis.write_decisions(result, decisions, inputs=inputs)
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
