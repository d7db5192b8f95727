"""``dressage-replay plot``: one figure of the log or of a sweep."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.flags import flagged
from cli.options import (
    READ,
    BatchGroups,
    Inputs,
    KeepVersionsList,
    MaxPreemptsList,
    OrderBy,
    ReadFlags,
    Reading,
    one_of,
    own_batch_groups,
    parse_grid,
    policies_option,
    reads_logs,
    some_policies,
)  # fmt: skip
from cli.output import progress_bar, warn


class PlotKind(StrEnum):
    sweep = "sweep"
    spans = "spans"
    gaps = "gaps"
    timeline = "timeline"
    heatmap = "heatmap"


@reads_logs()
def plot(
    kind: Annotated[
        PlotKind,
        typer.Argument(
            help="What to draw: sweep, spans, gaps, timeline or heatmap.",
            show_default=False,
            parser=one_of(PlotKind),
            metavar="KIND",
        ),
    ],
    inputs: Inputs,
    output: Annotated[Path, typer.Option("--output", "-o", help="Image file: .png, .svg or .pdf.")],
    keep_versions: KeepVersionsList = "0..4",
    max_preempts: MaxPreemptsList = "none,0..3",
    batch_groups: BatchGroups = None,
    order_by: OrderBy = None,
    policy: Annotated[
        list[str] | None,
        policies_option(
            "Draw these policies (repeat it; kind sweep only): tokens kept against "
            "version gap, and what each loses (docs/semantics.md §13)."
        ),
    ] = None,
    read: ReadFlags = READ,
) -> None:
    """Draw a figure: sweep, spans, gaps, timeline or heatmap \
(single-setting kinds use the first K and M)."""
    if policy:
        _plot_policies(
            kind, some_policies(policy), inputs, output, batch_groups=batch_groups,
            quiet=read.quiet, grid_given=bool({"keep_versions", "max_preempts"} & read.given),
            reading_=read.reading(inputs, order_by=order_by),
        )  # fmt: skip
        return
    ks, ms = parse_grid(keep_versions, max_preempts)
    analysis.check_output(output, analysis.FIGURE_FORMATS, what="figure", inputs=inputs)
    logs = read.reading(inputs, order_by=order_by)  # fmt: skip
    _, prepared, report = logs.prepare()
    batch_groups = own_batch_groups(
        inputs, batch_groups, prepared, report, limits=logs.options.limits
    )
    with progress_bar("replaying settings", quiet=read.quiet) as update:
        figure = analysis.make_plot(
            kind.value, prepared, keep_versions=ks, max_preempts=ms,
            batch_groups=batch_groups, progress=update,
        )  # fmt: skip
    analysis.save_figure(figure, output)
    typer.echo(f"wrote {output}", err=True)
    if (note := analysis.settings_note(kind.value, ks, ms)) is not None:
        typer.echo(f"note: {flagged(note)}", err=True)
    warn(report)


def _plot_policies(
    kind: PlotKind,
    policies: list[analysis.Policy],
    inputs: list[Path],
    output: Path,
    *,
    batch_groups: int | None,
    quiet: bool,
    grid_given: bool,
    reading_: Reading,
) -> None:
    """``plot sweep --policy A --policy B``: every policy on the same axes."""
    if kind is not PlotKind.sweep or grid_given:
        raise typer.BadParameter(
            "draws only `plot sweep`, with K and M inside each policy (dressage:k=K,m=M)",
            param_hint="--policy",
        )
    analysis.check_output(output, analysis.FIGURE_FORMATS, what="figure", inputs=inputs)
    _, prepared, report = reading_.prepare()
    batch_groups = own_batch_groups(
        inputs, batch_groups, prepared, report, limits=reading_.options.limits
    )
    with progress_bar("replaying policies", quiet=quiet) as update:
        result = analysis.sweep_policies(
            prepared, policies, batch_groups=batch_groups, progress=update
        )
    analysis.save_figure(analysis.plot_policies(result), output)
    typer.echo(f"wrote {output}", err=True)
    warn(report)
