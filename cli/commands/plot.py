"""``dressage-replay plot``: one figure of the log or of a sweep."""

from __future__ import annotations

import functools
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.flags import options_refused_as_usage
from cli.groups import GRID, READ, GridFlags, ReadFlags, sweeps_logs
from cli.options import (
    Force,
    Inputs,
    one_of,
    policies_option,
    some_policies,
)  # fmt: skip
from cli.output import progress_bar, refuse_existing, say_note, warn


class PlotKind(StrEnum):
    sweep = "sweep"
    spans = "spans"
    gaps = "gaps"
    timeline = "timeline"
    heatmap = "heatmap"


@sweeps_logs()
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
    force: Force = False,
    grid: GridFlags = GRID,
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
(spans and timeline draw one setting: -k and -m, or a run folder's own; gaps one M)."""
    bars = functools.partial(progress_bar, quiet=read.quiet)
    options = read.options(order_by=grid.order_by)
    if policy:
        policies = some_policies(policy)
        if kind is not PlotKind.sweep or grid.grid_given:
            raise typer.BadParameter(
                "draws only `plot sweep`, with K and M inside each policy (dressage:k=K,m=M)",
                param_hint="--policy",
            )
        analysis.check_output(output, analysis.FIGURE_FORMATS, what="figure", inputs=inputs)
        refuse_existing(output, force=force)
        swept = analysis.sweep_log(
            inputs, policies=policies, batch_groups=grid.batch_groups, options=options,
            order_by=grid.order_by, progress=bars, note=say_note,
            **grid.model(analysis.picks_run_loop(inputs, options)),
        )  # fmt: skip
        assert isinstance(swept.result, analysis.PolicySweep)  # as policies were given
        analysis.save_figure(analysis.plot_policies(swept.result), output, inputs=inputs)
        typer.echo(f"wrote {output}", err=True)
        warn(swept.report, verbose=read.verbose)
        return
    ks, ms = grid.parse_for(inputs, options)
    single = kind in (PlotKind.spans, PlotKind.timeline)
    run_loop = analysis.picks_run_loop(inputs, options)
    if single and not run_loop and not grid.grid_given:
        raise typer.BadParameter(
            f"a {kind.value} figure draws one setting, and with neither given both controls "
            "would be off: give -k K and -m M (-k 0 -m none draws them off)",
            param_hint="-k/-m",
        )
    if kind is not PlotKind.sweep and kind is not PlotKind.heatmap and not run_loop:
        ms = ms if "max_preempts" in grid.given else [None]  # one M: off unless given
    if single and run_loop and "keep_versions" not in grid.given:
        ks = []  # the run's own K (analysis.run_plot_k)
    analysis.check_output(output, analysis.FIGURE_FORMATS, what="figure", inputs=inputs)
    refuse_existing(output, force=force)
    if run_loop:  # Dressage's own loop (§12.7)
        with options_refused_as_usage():
            run = analysis.read_run_folder(
                inputs[0], options, batch_groups=grid.batch_groups, order_by=grid.order_by
            )
        with bars("replaying settings") as update:
            figure = analysis.make_run_plot(
                kind.value, run, keep_versions=ks, max_preempts=ms, progress=update,
                **grid.model(run_loop),
            )  # fmt: skip
        analysis.save_figure(figure, output, inputs=inputs)
        typer.echo(f"wrote {output}", err=True)
        if single and not ks:
            say_note(
                f"drew the run's own setting, K={analysis.run_plot_k(run)} as its staleness "
                "metrics tell (-k to choose another)"
            )
        return
    log = analysis.load_log(
        inputs, options=options, order_by=grid.order_by, batch_groups=grid.batch_groups,
        progress=bars,
        note=say_note,
    )  # fmt: skip
    with bars("replaying settings") as update:
        figure = analysis.make_plot(
            kind.value, log.prepared, keep_versions=ks, max_preempts=ms,
            batch_groups=log.batch_groups, progress=update,
        )  # fmt: skip
    analysis.save_figure(figure, output, inputs=inputs)
    typer.echo(f"wrote {output}", err=True)
    if (note := analysis.settings_note(kind.value, ks, ms, grid.given)) is not None:
        say_note(note)
    warn(log.report, verbose=read.verbose)
