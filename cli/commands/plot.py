"""``dressage-replay plot``: one figure of the log or of a sweep."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

import analysis
from cli.options import (
    BadRecordPolicy,
    BatchGroups,
    FieldOption,
    IncludeEval,
    Inputs,
    KeepVersionsList,
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
    include_eval: IncludeEval = False,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Draw a figure: sweep, spans, gaps, timeline or heatmap \
(single-setting kinds use the first K and M)."""
    from analysis.views.plots import FIGURE_FORMATS, make_plot, save_figure

    ks, ms = parse_grid(keep_versions, max_preempts)
    analysis.check_output(output, FIGURE_FORMATS, what="figure", inputs=inputs)
    logs = reading(
        inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle,
        order_by=order_by, quiet=quiet, include_eval=include_eval,
    )  # fmt: skip
    _, prepared, report = logs.prepare()
    with progress_bar("replaying settings", quiet=quiet) as update:
        figure = make_plot(
            kind.value, prepared, keep_versions=ks, max_preempts=ms,
            batch_groups=batch_groups, progress=update,
        )  # fmt: skip
    save_figure(figure, output)
    typer.echo(f"wrote {output}", err=True)
    if (note := _unused_settings(kind.value, ks, ms)) is not None:
        typer.echo(f"note: {note}", err=True)
    warn(report)


def _unused_settings(kind: str, ks: list[int], ms: list[int | None]) -> str | None:
    """Say so when a figure of one setting (or of one M) was given more than it draws."""
    limit = "none" if ms[0] is None else ms[0]
    if kind in ("spans", "timeline") and (len(ks) > 1 or len(ms) > 1):
        return (
            f"a {kind} figure draws one setting: K={ks[0]}, M={limit}, the first of those "
            "given (pass one -k and one -m to choose)"
        )
    if kind == "gaps" and len(ms) > 1:
        return f"a gaps figure draws one M: M={limit}, the first of those given"
    return None
