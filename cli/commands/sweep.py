"""``dressage-replay sweep``: every combination of K and M from one load of the log."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

import analysis
from cli.flags import options_refused_as_usage
from cli.groups import GRID, READ, GridFlags, ReadFlags, sweeps_logs
from cli.options import (
    FLAG,
    Force,
    Inputs,
    policies_option,
    some_policies,
)  # fmt: skip
from cli.output import (
    is_stdout,
    json_text,
    print_csv,
    progress_bar,
    refuse_existing,
    results_out,
    say_note,
    stdout_console,
    stdout_once,
    warn,
)


@sweeps_logs(placed={"output": "batch_groups", "json_output": "output", "force": "json_output"})
def sweep(
    inputs: Inputs,
    grid: GridFlags = GRID,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the rows to a file: .csv, .parquet, .json, .jsonl or .arrow; - writes "
            "CSV to standard output.",
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the rows as JSON.", metavar=FLAG)
    ] = False,
    force: Force = False,
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
    if policy and grid.grid_given:
        raise typer.BadParameter(
            "give K and M inside each policy (dressage:k=K,m=M), not beside --policy",
            param_hint="--policy",
        )
    policies = some_policies(policy or [])
    options = read.options(order_by=grid.order_by)
    ks, ms = ([], []) if policies else grid.parse_for(inputs, options)
    stdout_once(**{"--json": json_output, "--output": output})
    if output is not None and not is_stdout(output):  # before the log is read: a typo is told
        analysis.check_output(output, analysis.FRAME_FORMATS, inputs=inputs)
    refuse_existing(output, force=force)
    model = grid.model(analysis.picks_run_loop(inputs, options))
    with options_refused_as_usage():
        swept = analysis.sweep_log(
            inputs, keep_versions=ks, max_preempts=ms, policies=policies,
            batch_groups=grid.batch_groups, options=options, order_by=grid.order_by,
            progress=lambda doing: progress_bar(doing, quiet=read.quiet), note=say_note,
            **model,
        )  # fmt: skip
    if output is not None and not is_stdout(output):
        analysis.write_frame_to(swept.result.rows, output, inputs=inputs)
        typer.echo(f"wrote {output}", err=True)  # as every command that writes says
    with results_out():
        if is_stdout(output):  # the rows are the output
            print_csv(swept.result.rows)
        elif json_output:
            typer.echo(json_text(_json_rows(swept.result)))
        elif isinstance(swept.result, analysis.PolicySweep):
            from cli.render import print_policy_sweep

            print_policy_sweep(swept.result.rows, stdout_console())
        else:
            from cli.render import print_sweep

            print_sweep(swept.result, stdout_console())
    warn(swept.report, verbose=read.verbose)


def _json_rows(result: analysis.SweepResult | analysis.PolicySweep) -> list[dict[str, Any]]:
    """The rows as JSON objects; a policy's with its knobs."""
    rows: list[dict[str, Any]] = result.rows.to_dicts()
    if isinstance(result, analysis.PolicySweep):
        for row, replayed in zip(rows, result.results, strict=True):
            row["knobs"] = replayed.policy.to_dict()["knobs"]
    return rows
