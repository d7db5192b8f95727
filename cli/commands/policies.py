"""``replay --policy`` and ``sweep --policy``: the staleness rules of Dressage and of other
systems over one log, compared on the same figures (docs/semantics.md §13)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

import analysis
from analysis.output.result_writers import DECISION_COLUMNS
from analysis.rules.policies import (
    DressagePolicy,
    Policy,
    PolicyResult,
    replay_policy,
    sweep_policies,
)
from cli.options import Reading, own_batch_groups
from cli.output import print_json, progress_bar, report_dict, results_out, stdout_console, warn


def replay_with_policy(
    inputs: list[Path],
    policy: Policy,
    *,
    batch_groups: int | None,
    order_by: str | None,
    json_output: bool,
    decisions: Path | None,
    trajectories: Path | None,
    bias: bool,
    reading_: Reading,
) -> None:
    """One policy over the inputs on the simple loop, as ``sweep --policy`` replays it, for
    every policy and input; a run folder's records are read as a log (traj_payload/ and
    traj_err/ in completion order), with the run's own B when none is given."""
    table, prepared, report = reading_.prepare(whole_table=bias)
    batch_groups = own_batch_groups(
        inputs, batch_groups, prepared, report, limits=reading_.options.limits
    )
    result = replay_policy(prepared, policy, batch_groups=batch_groups)
    _write_tables(result, prepared, inputs, decisions=decisions, trajectories=trajectories)
    dropped = analysis.who_gets_dropped(prepared, result.result, table=table) if bias else None
    with results_out():
        if json_output:
            extra = {"bias": dropped.to_dict()} if dropped else {}
            print_json({**result.to_dict(), **extra, **report_dict(report)})
        else:
            from cli.render import print_bias, print_summary

            title = None if isinstance(policy, DressagePolicy) else policy.label()
            print_summary(result.summary, stdout_console(), policy=title)
            if dropped is not None:
                print_bias(dropped, stdout_console())
    warn(report)


def _write_tables(
    result: PolicyResult,
    prepared: analysis.PreparedLog,
    inputs: list[Path],
    *,
    decisions: Path | None,
    trajectories: Path | None,
) -> None:
    if decisions is not None:
        frame = result.decisions
        analysis.write_frame_to(
            frame.select(
                *DECISION_COLUMNS, *(c for c in frame.columns if c not in DECISION_COLUMNS)
            ),
            decisions,
            inputs=inputs,
        )
        typer.echo(f"wrote {decisions}", err=True)
    if trajectories is not None:
        analysis.write_trajectories(prepared, result.result, trajectories, inputs=inputs)
        typer.echo(f"wrote {trajectories}", err=True)


def sweep_with_policies(
    inputs: list[Path],
    policies: list[Policy],
    *,
    batch_groups: int | None,
    output: Path | None,
    json_output: bool,
    quiet: bool,
    reading_: Reading,
) -> None:
    """Every policy over one load of the log: one row each, the same columns."""
    _, prepared, report = reading_.prepare()
    batch_groups = own_batch_groups(
        inputs, batch_groups, prepared, report, limits=reading_.options.limits
    )
    with progress_bar("replaying policies", quiet=quiet) as update:
        result = sweep_policies(prepared, policies, batch_groups=batch_groups, progress=update)
    if output is not None:
        analysis.write_frame_to(result.rows, output, inputs=inputs)
        typer.echo(f"wrote {output}", err=True)
    with results_out():
        if json_output:
            rows: list[dict[str, Any]] = result.rows.to_dicts()
            for row, replayed in zip(rows, result.results, strict=True):
                row["knobs"] = replayed.policy.to_dict()["knobs"]
            typer.echo(json.dumps(rows))
        else:
            from cli.render import print_policy_sweep

            print_policy_sweep(result.rows, stdout_console())
    warn(report)
