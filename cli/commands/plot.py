"""``dressage-replay plot``: one figure of the log or of a sweep."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.flags import flagged
from cli.options import (
    BadRecordPolicy,
    BatchGroups,
    FieldOption,
    IncludeEval,
    Inputs,
    KeepVersionsList,
    LimitOption,
    MaxPreemptsList,
    OnBadRecord,
    OrderBy,
    Quiet,
    Traceback,
    TrustPickle,
    one_of,
    parse_grid,
    reading,
)  # fmt: skip
from cli.output import progress_bar, warn


class PlotKind(StrEnum):
    sweep = "sweep"
    spans = "spans"
    gaps = "gaps"
    timeline = "timeline"
    heatmap = "heatmap"


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
    field: FieldOption = None,
    on_bad_record: OnBadRecord = BadRecordPolicy.fail,
    trust_pickle: TrustPickle = False,
    limit: LimitOption = None,
    include_eval: IncludeEval = False,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Draw a figure: sweep, spans, gaps, timeline or heatmap \
(single-setting kinds use the first K and M)."""
    from analysis.views.plots import FIGURE_FORMATS, make_plot, save_figure, settings_note

    ks, ms = parse_grid(keep_versions, max_preempts)
    analysis.check_output(output, FIGURE_FORMATS, what="figure", inputs=inputs)
    logs = reading(
        inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle,
        order_by=order_by, quiet=quiet, include_eval=include_eval, limit=limit,
    )  # fmt: skip
    _, prepared, report = logs.prepare()
    with progress_bar("replaying settings", quiet=quiet) as update:
        figure = make_plot(
            kind.value, prepared, keep_versions=ks, max_preempts=ms,
            batch_groups=batch_groups, progress=update,
        )  # fmt: skip
    save_figure(figure, output)
    typer.echo(f"wrote {output}", err=True)
    if (note := settings_note(kind.value, ks, ms)) is not None:
        typer.echo(f"note: {flagged(note)}", err=True)
    warn(report)
