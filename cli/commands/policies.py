"""``sweep --policy``: the staleness rules of Dressage and of other
systems over one log, compared on the same figures (docs/semantics.md §13)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

import analysis
from cli.options import Reading, own_batch_groups
from cli.output import progress_bar, results_out, stdout_console, warn


def sweep_with_policies(
    inputs: list[Path],
    policies: list[analysis.Policy],
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
        result = analysis.sweep_policies(
            prepared, policies, batch_groups=batch_groups, progress=update
        )
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
