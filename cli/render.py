"""Rich renderings of library results for the terminal; the library itself never prints."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from analysis import LogInspection, ReplaySummary

_COLUMNS = (
    ("kept", "kept"),
    ("dropped_stale_arrival", "stale, arrival"),
    ("dropped_stale_pending", "stale, pending"),
    ("rejected_span", "span rejected"),
    ("failed", "failed"),
)


def _cell(value: int | None, total: int | None) -> str:
    if value is None:
        return "n/a"
    if not total:
        return f"{value:,}"
    return f"{value:,} {100 * value / total:.1f}%"


def _number(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}" if isinstance(value, float) else f"{value:,}"


def print_summary(summary: ReplaySummary, console: Console) -> None:
    """Print one replay's summary as a table of outcomes plus staleness figures."""
    config = summary.config
    limit = "none" if config.max_preempts is None else config.max_preempts
    table = Table(
        title=(
            f"Replay: keep_versions={config.keep_versions}  max_preempts={limit}  "
            f"batch_groups={config.batch_groups}"
        ),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("outcome", no_wrap=True)
    for unit in summary.counts:
        table.add_column(unit, justify="right", no_wrap=True)
    table.add_row("total", *(_cell(c["total"], None) for c in summary.counts.values()))
    for key, label in _COLUMNS:
        table.add_row(label, *(_cell(c[key], c["total"]) for c in summary.counts.values()))
    console.print(table)

    gap, span = summary.version_gap, summary.version_span
    batches = summary.batches
    lines = [
        f"batches emitted     {batches['emitted']}"
        + ("  (last one partial)" if batches["last_partial"] else ""),
        f"versions observed   {len(summary.versions)}"
        f"  (current index {_number(summary.current_version_index)},"
        f" cutoff index {_number(summary.cutoff_version_index)})",
        f"version gap, kept   min {_number(gap['min'])}  mean {_number(gap['mean'])}"
        f"  max {_number(gap['max'])}",
        f"version span, kept  min {_number(span['kept']['min'])}  mean"
        f" {_number(span['kept']['mean'])}  max {_number(span['kept']['max'])}",
        f"version span, all   min {_number(span['all']['min'])}  mean"
        f" {_number(span['all']['mean'])}  max {_number(span['all']['max'])}",
    ]
    if summary.unchecked_trajectories:
        lines.append(
            f"trajectories without token versions (span not checked): "
            f"{summary.unchecked_trajectories:,}"
        )
    for line in lines:
        console.print(line, highlight=False)
    for note in summary.notes:
        console.print(f"note: {note}", style="dim", highlight=False)


def print_inspection(inspection: LogInspection, console: Console) -> None:
    """Print what a log holds and its data-quality counts."""
    facts = Table(show_header=False, title="Log", title_justify="left")
    facts.add_column("what")
    facts.add_column("value", justify="right")
    info = inspection.to_dict()
    for key in ("sources", "records", "groups", "trajectories", "segments", "trainer_steps"):
        facts.add_row(key.replace("_", " "), f"{info[key]:,}")
    facts.add_row("format", ", ".join(inspection.formats) or "-")
    facts.add_row("inferred batch groups", _number(inspection.inferred_batch_groups))
    console.print(facts)

    quality = Table(show_header=False, title="Data quality", title_justify="left")
    quality.add_column("what")
    quality.add_column("count", justify="right")
    for key, value in inspection.quality.items():
        quality.add_row(key.replace("_", " "), f"{value:,}")
    console.print(quality)

    shown = ", ".join(inspection.versions[:20])
    more = len(inspection.versions) - 20
    console.print(
        f"versions in observation order ({len(inspection.versions)}): {shown}"
        + (f", ... ({more} more)" if more > 0 else ""),
        highlight=False,
    )
    for warning in inspection.warnings:
        console.print(f"warning: {warning}", style="yellow", highlight=False)
