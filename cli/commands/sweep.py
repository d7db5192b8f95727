"""``dressage-replay sweep``: every combination of K and M from one load of the log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.options import (
    FLAG,
    READ,
    BatchGroups,
    Inputs,
    KeepVersionsList,
    MaxPreemptsList,
    OrderBy,
    ReadFlags,
    own_batch_groups,
    parse_grid,
    policies_option,
    reads_logs,
    some_policies,
)  # fmt: skip
from cli.output import progress_bar, results_out, stdout_console, warn


@reads_logs()
def sweep(
    inputs: Inputs,
    keep_versions: KeepVersionsList = "0..4",
    max_preempts: MaxPreemptsList = "none,0..3",
    batch_groups: BatchGroups = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the rows to a file: .csv, .parquet, .json, .jsonl or .arrow.",
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the rows as JSON.", metavar=FLAG)
    ] = False,
    order_by: OrderBy = None,
    policy: Annotated[
        list[str] | None,
        policies_option(
            "Sweep these policies instead of K and M (repeat it): dressage:k=2,m=1, "
            "prime-rl:max_off_policy_steps=1, verl-drop:max_off_policy_threshold=2, "
            "nemo-windowed:max_staleness_versions=1 (docs/semantics.md §13); one row each."
        ),
    ] = None,
    read: ReadFlags = READ,
) -> None:
    """Replay every combination of K and M from one load of the log; mark the Pareto front.

    With --policy (repeated), one row per policy instead (docs/semantics.md §13)."""
    if policy:
        from cli.commands.policies import sweep_with_policies

        if {"keep_versions", "max_preempts"} & read.given:
            raise typer.BadParameter(
                "give K and M inside each policy (dressage:k=K,m=M), not beside --policy",
                param_hint="--policy",
            )
        policies = some_policies(policy)
        if output is not None:
            analysis.check_output(output, analysis.FRAME_FORMATS, inputs=inputs)
        sweep_with_policies(
            inputs, policies, batch_groups=batch_groups, output=output, json_output=json_output,
            quiet=read.quiet, reading_=read.reading(inputs, order_by=order_by),
        )  # fmt: skip
        return
    ks, ms = parse_grid(keep_versions, max_preempts)
    if output is not None:  # before the log is read: a typo is told at once
        analysis.check_output(output, analysis.FRAME_FORMATS, inputs=inputs)
    logs = read.reading(inputs, order_by=order_by)  # fmt: skip
    _, prepared, report = logs.prepare()
    batch_groups = own_batch_groups(
        inputs, batch_groups, prepared, report, limits=logs.options.limits
    )
    with progress_bar("replaying settings", quiet=read.quiet) as update:
        result = analysis.sweep(
            prepared, keep_versions=ks, max_preempts=ms, batch_groups=batch_groups, progress=update
        )
    if output is not None:
        analysis.write_frame_to(result.rows, output, inputs=inputs)
        typer.echo(f"wrote {output}", err=True)  # as every command that writes says
    with results_out():
        if json_output:
            typer.echo(json.dumps(result.rows.to_dicts()))
        else:
            from cli.render import print_sweep

            print_sweep(result, stdout_console())
    warn(report)
