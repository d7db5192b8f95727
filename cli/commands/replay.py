"""``dressage-replay replay``: one setting of both staleness controls."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

import analysis
from cli.flags import FLAGS, flagged
from cli.options import (
    FLAG,
    BadRecordPolicy,
    BatchGroups,
    FieldOption,
    IncludeEval,
    Inputs,
    LimitOption,
    LogFormatOption,
    OnBadRecord,
    OrderBy,
    PolicyOption,
    Quiet,
    Reading,
    Traceback,
    TrustPickle,
    one_keep_versions,
    one_max_preempts,
    own_batch_groups,
    reading,
    run_limits,
    the_policy,
)  # fmt: skip
from cli.output import print_json, report_dict, results_out, stdout_console, warn


def replay(
    inputs: Inputs,
    keep_versions: Annotated[
        int,
        typer.Option(
            "--keep-versions",
            "-k",
            help="K: keep groups from the K newest observed versions; 0 or off disables.",
            parser=one_keep_versions,
            metavar="<int|off>",
        ),
    ] = 0,
    max_preempts: Annotated[
        str,
        typer.Option(
            "--max-preempts",
            "-m",
            help="M: a trajectory may span at most M+1 versions; none or off disables.",
            metavar="<int|none>",
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
    policy: PolicyOption = None,
    field: FieldOption = None,
    on_bad_record: OnBadRecord = BadRecordPolicy.fail,
    trust_pickle: TrustPickle = False,
    limit: LimitOption = None,
    include_eval: IncludeEval = False,
    log_format: LogFormatOption = None,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Replay both staleness controls for one setting and summarise what they would do.

    A Dressage run folder (traj_payload/, traj_err/, rollout_data/, dressage_log.txt) is \
replayed as Dressage's own collector loop runs (README: Your run's logs); with --policy, \
its records are replayed on the simple loop, as sweep --policy does."""
    for output in (decisions, trajectories):  # before the log is read: a typo is told at once
        if output is not None:
            analysis.check_output(output, analysis.FRAME_FORMATS, inputs=inputs)
    # the second would be written over the first
    if decisions and trajectories and decisions.resolve() == trajectories.resolve():
        raise analysis.OutputError(
            f"{trajectories}: --decisions and --trajectories name the same file; give each its own"
        )
    chosen = (
        None
        if policy is None
        else the_policy(policy, keep_versions=keep_versions, max_preempts=max_preempts)
    )
    # --format reads a folder as that format's log, not as a run folder
    run_folder = log_format is None and len(inputs) == 1 and analysis.is_run_folder(inputs[0])
    if chosen is not None:  # every policy on the simple loop, as sweep --policy (§13.7)
        from cli.commands.policies import replay_with_policy

        replay_with_policy(
            inputs, chosen,
            batch_groups=batch_groups, order_by=order_by, json_output=json_output,
            decisions=decisions, trajectories=trajectories, bias=bias,
            reading_=reading(
                inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle,
                order_by=order_by, quiet=quiet, include_eval=include_eval, limit=limit,
                log_format=log_format,
            ),
        )  # fmt: skip
        return
    if run_folder:  # Dressage's own loop (docs/semantics.md §12)
        refuse_unused(
            batch_groups=batch_groups, order_by=order_by, fields=field, bias=bias,
            on_bad_record=on_bad_record, trust_pickle=trust_pickle, include_eval=include_eval,
        )  # fmt: skip
        replay_run_folder(
            inputs[0], keep_versions, one_max_preempts(max_preempts), json_output=json_output,
            decisions=decisions, trajectories=trajectories, limits=run_limits(limit),
        )  # fmt: skip
        return
    config = analysis.ReplayConfig(
        keep_versions=keep_versions,
        max_preempts=one_max_preempts(max_preempts),
        batch_groups=batch_groups,
    )
    logs = reading(
        inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle,
        order_by=order_by, quiet=quiet, include_eval=include_eval, limit=limit,
        log_format=log_format,
    )  # fmt: skip
    replay_logs(logs, config, json_output=json_output, bias=bias, inputs=inputs,
                decisions=decisions, trajectories=trajectories)  # fmt: skip


def replay_logs(
    logs: Reading,
    config: analysis.ReplayConfig,
    *,
    json_output: bool,
    bias: bool,
    inputs: list[Path],
    decisions: Path | None,
    trajectories: Path | None,
) -> None:
    """Logs replayed group by group (the simple loop, docs/semantics.md §3)."""
    table, prepared, report = logs.prepare(whole_table=bias)
    given = own_batch_groups(
        inputs, config.batch_groups, prepared, report, limits=logs.options.limits
    )
    config = analysis.ReplayConfig(
        keep_versions=config.keep_versions, max_preempts=config.max_preempts, batch_groups=given
    )
    result = analysis.replay(prepared, config)
    if decisions is not None:
        analysis.write_decisions(result, decisions, inputs=inputs)
        typer.echo(f"wrote {decisions}", err=True)  # as every command that writes says
    if trajectories is not None:
        analysis.write_trajectories(prepared, result, trajectories, inputs=inputs)
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


_RUN_LOOP_OWN = {
    "batch_groups": "the batch size is the run's own (its dressage_log.txt's target_groups)",
    "order_by": "groups arrive in the order the run's trajectories finished",
    "fields": "the run's own files are read, not records whose fields could be renamed",
    "bias": "who gets dropped is compared on the simple loop only",
    "on_bad_record": "a run folder is read whole, a bad file is an error and never skipped",
    "trust_pickle": "a run folder's dumps are always read by the safe reader",
    "include_eval": "evaluation dumps (eval_<N>.pt) are no steps of the loop",
}
"""Why each option of the simple loop does not apply to a run folder replayed as
Dressage's loop."""
_SIMPLE_LOOP_ONLY = ("batch_groups", "order_by", "fields", "bias")
"""Those that apply when the folder's records are replayed on the simple loop instead."""


def refuse_unused(**given: Any) -> None:
    """Options of the simple loop given for a run folder: a usage error naming each, what
    it does not apply to and why, and what to do."""
    unused = [
        name
        for name, value in given.items()
        if value not in (None, False, [], BadRecordPolicy.fail)
    ]
    if not unused:
        return
    flags = [FLAGS.get(name, f"--{name}") for name in unused]
    why = "; ".join(
        f"{flag}: {_RUN_LOOP_OWN[name]}" for name, flag in zip(unused, flags, strict=True)
    )
    elsewhere = [
        flag for name, flag in zip(unused, flags, strict=True) if name in _SIMPLE_LOOP_ONLY
    ]
    todo = f"leave {'it' if len(unused) == 1 else 'them'} out"
    if elsewhere:
        todo += (
            f", or add --format artifacts to replay the folder's records on the simple loop, "
            f"where {', '.join(elsewhere)} {'applies' if len(elsewhere) == 1 else 'apply'}"
        )
    raise typer.BadParameter(
        f"not used when a run folder is replayed as Dressage's loop (docs/semantics.md §12): "
        f"{why}; {todo}",
        param_hint=", ".join(flags),
    )


def replay_run_folder(
    folder: Path,
    keep_versions: int,
    max_preempts: int | None,
    *,
    json_output: bool,
    decisions: Path | None,
    trajectories: Path | None,
    limits: analysis.Limits,
) -> None:
    """A run folder, replayed as Dressage's collector loop: K as given; M and B are the
    run's own (its span rejections are on disk, its batch size in its log); its files
    are read within ``limits`` (--limit)."""
    if max_preempts is not None:
        typer.echo(
            f"note: --max-preempts {max_preempts} is not applied: a run folder is replayed with "
            "the run's own M (its span rejections are on disk, in traj_err/)",
            err=True,
        )
    result = analysis.replay_run(
        analysis.read_run(folder, limits=limits), keep_versions=keep_versions
    )
    for path in analysis.write_run_tables(
        result, decisions=decisions, trajectories=trajectories, inputs=[folder]
    ):
        typer.echo(f"wrote {path}", err=True)
    with results_out():
        if json_output:
            print_json(result.to_dict())
        else:
            from cli.render import print_run_summary

            print_run_summary(result, stdout_console())
    for warning in result.warnings:
        typer.echo(f"warning: {flagged(warning)}", err=True)
