"""One self-contained HTML report: what the log holds, the sweep, the plots, who gets dropped.

Everything is inline (figures as base64 PNG, styles in the page), so the file opens
anywhere without a network.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from analysis.engine import PARETO_NOTE, PreparedLog, ReplayResult, SweepResult, sweep
from analysis.errors import render
from analysis.io.tables import atomic_path, check_output
from analysis.views.bias import who_gets_dropped
from analysis.views.inspection import LogInspection

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.8rem; margin: 0.5rem 0; }
th, td { padding: 0.2rem 0.6rem; border-bottom: 1px solid #eee; text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr.pareto td { font-weight: 600; background: #f3f8ff; }
figure { margin: 1rem 0; } figure img { max-width: 100%; border: 1px solid #eee; }
.note { color: #555; font-size: 0.85rem; }
.wide { overflow-x: auto; } th { white-space: normal; max-width: 5.5rem; vertical-align: bottom; }
"""

# Records, for a browser test, how many figures loaded and whether any script failed.
_CHECK_SCRIPT = """
window.addEventListener('error', () => { document.body.dataset.errors = '1'; }, true);
window.addEventListener('load', () => {
  const images = Array.from(document.images);
  document.body.dataset.figures = String(images.length);
  document.body.dataset.figuresLoaded =
    String(images.filter((i) => i.complete && i.naturalWidth > 0).length);
});
"""


def focus_setting(result: SweepResult) -> ReplayResult:
    """The setting the report looks at closely: the Pareto-efficient one with a control on
    that keeps the most tokens (samples when tokens are unknown), else the first setting."""
    rows = result.rows.with_row_index("position")
    kept = "tokens_kept_pct" if rows["tokens_kept_pct"].null_count() == 0 else "samples_kept_pct"
    candidates = rows.filter(
        pl.col("pareto") & ((pl.col("keep_versions") > 0) | pl.col("max_preempts").is_not_null())
    ).sort(kept, descending=True, maintain_order=True)
    position = int(candidates["position"][0]) if candidates.height else 0
    return result.results[position]


def _is_chosen(result: SweepResult, focus: ReplayResult) -> bool:
    """Whether the focus setting is Pareto-efficient with a control on (not the fallback)."""
    config = focus.config
    row = result.rows.filter(
        (pl.col("keep_versions") == config.keep_versions)
        & pl.col("max_preempts").eq_missing(config.max_preempts)
    )
    return bool(
        row.height
        and row["pareto"][0]
        and (config.keep_versions > 0 or config.max_preempts is not None)
    )


def _has_control(result: SweepResult) -> bool:
    """Whether any swept setting has a control on (K > 0 or M given)."""
    rows = result.rows
    return bool(((rows["keep_versions"] > 0) | rows["max_preempts"].is_not_null()).any())


def build_report(
    prepared: PreparedLog,
    table: pl.DataFrame,
    inspection: LogInspection,
    *,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    batch_groups: int | None = None,
    title: str = "dressage-replay report",
    progress: Callable[[int, int], None] | None = None,
    say: Callable[[str, str | None], str] | None = None,
) -> str:
    """Return the report as one HTML document; ``say`` words the settings its notes name
    (the command line passes its flags; by default the library's keywords)."""
    from analysis.views import plots

    swept = sweep(
        prepared,
        keep_versions=keep_versions,
        max_preempts=max_preempts,
        batch_groups=batch_groups,
        progress=progress,
    )
    focus = focus_setting(swept)
    config = focus.config
    chosen = (
        "the Pareto-efficient setting with a control on that keeps the most tokens"
        if _is_chosen(swept, focus)
        else "the first setting (no setting with a control on is Pareto-efficient)"
        if _has_control(swept)
        else "the first setting (no setting with a control on was swept)"
    )
    # The sweep already replayed every K under the focus setting's M: reuse those results.
    per_k = [r for r in swept.results if r.config.max_preempts == config.max_preempts]
    figures = [
        ("Tokens kept and version gap against K", plots.plot_sweep(swept)),
        ("Tokens kept over the K x M grid", plots.plot_heatmap(swept)),
        ("Trajectory version spans, all vs kept", plots.plot_spans(prepared, focus)),
        ("Version gaps of kept trajectories for each K", plots.plot_gaps(prepared, per_k)),
        ("Per emitted batch", plots.plot_timeline(focus)),
    ]
    bias = who_gets_dropped(prepared, focus, table=table)
    limit = "none" if config.max_preempts is None else config.max_preempts
    setting = f"K={config.keep_versions}, M={limit}, B={config.batch_groups}"
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        "<h2>The log</h2>",
        _facts_table(inspection),
        "<h2>Settings compared</h2>",
        _frame_table(_sweep_display(swept.rows), row_classes=_pareto_classes(swept.rows)),
        f"<p class='note'>{html.escape(PARETO_NOTE)}</p>",
        "<h2>Figures</h2>",
        f"<p class='note'>Single-setting figures use {html.escape(setting)}: "
        f"{html.escape(chosen)}.</p>",
        *(_figure(caption, figure) for caption, figure in figures),
        f"<h2>Who gets dropped ({html.escape(setting)})</h2>",
        _frame_table(bias.table.rename(_BIAS_HEADERS)),
        f"<p class='note'>Groups that never reached a batch ({len(bias.never_batched)}): "
        f"{html.escape(', '.join(bias.never_batched[:200]))}"
        f"{' ...' if len(bias.never_batched) > 200 else ''}</p>",
    ]
    for note in focus.summary.notes:
        text = note if say is None else render(note, say)
        parts.append(f"<p class='note'>{html.escape(text)}</p>")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style>"
        f"<script>{_CHECK_SCRIPT}</script></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


def _figure(caption: str, figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    return (
        f"<figure><img alt='{html.escape(caption)}' src='data:image/png;base64,{encoded}'>"
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def _facts_table(inspection: LogInspection) -> str:
    facts = inspection.to_dict()
    rows: list[tuple[str, Any]] = [
        (key.replace("_", " "), facts[key])
        for key in ("formats", "records", "groups", "trajectories", "segments", "trainer_steps",
                    "inferred_batch_groups", "versions_observed")
    ]  # fmt: skip
    rows += [(key.replace("_", " "), value) for key, value in facts["quality"].items()]
    rows += [("warning", warning) for warning in facts["warnings"]]
    body = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{html.escape(_text(value))}</td></tr>"
        for name, value in rows
    )
    return f"<table>{body}</table>"


_BIAS_HEADERS = {
    "outcome": "outcome",
    "groups": "groups",
    "reward_mean": "reward mean",
    "arrival_delay_mean": "arrival delay (versions)",
    "trajectories": "trajectories",
    "tokens_per_trajectory_mean": "tokens per traj. mean",
    "tokens_per_trajectory_median": "tokens per traj. median",
    "segments_per_trajectory_mean": "segments per traj.",
}

_SWEEP_HEADERS = {
    "pareto": "*",
    "keep_versions": "K",
    "max_preempts": "M",
    "groups_kept_pct": "groups kept %",
    "samples_kept_pct": "samples kept %",
    "tokens_kept_pct": "tokens kept %",
    "dropped_arrival_pct": "stale arrival %",
    "dropped_pending_pct": "stale pending %",
    "rejected_span_pct": "span rejected %",
    "failed_pct": "failed %",
    "batches_emitted": "batches",
    "version_gap_mean": "gap mean",
    "version_gap_max": "gap max",
    "version_span_mean": "span mean",
    "version_span_max": "span max",
}


def _sweep_display(rows: pl.DataFrame) -> pl.DataFrame:
    """The sweep rows as the report shows them: Pareto star first, short headers."""
    shown = rows.with_columns(
        pl.col("max_preempts").cast(pl.String).fill_null("none"),
        pl.when(pl.col("pareto")).then(pl.lit("*")).otherwise(pl.lit("")).alias("pareto"),
    )
    return shown.select(list(_SWEEP_HEADERS)).rename(_SWEEP_HEADERS)


def _pareto_classes(rows: pl.DataFrame) -> list[str]:
    return ["pareto" if efficient else "" for efficient in rows["pareto"].to_list()]


def _frame_table(frame: pl.DataFrame, *, row_classes: Sequence[str] = ()) -> str:
    head = "".join(f"<th>{html.escape(name)}</th>" for name in frame.columns)
    body = []
    for position, row in enumerate(frame.iter_rows()):
        css = row_classes[position] if position < len(row_classes) else ""
        cells = "".join(f"<td>{html.escape(_text(value))}</td>" for value in row)
        body.append(f"<tr class='{css}'>{cells}</tr>")
    return (
        f"<div class='wide'><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


REPORT_FORMATS = (".html", ".htm")
"""What a report may be written as."""


def write_report(document: str, path: Path, *, inputs: Sequence[Path] = ()) -> None:
    """Write the report atomically; refuse a path that is one of the inputs."""
    path = Path(path)
    check_output(path, REPORT_FORMATS, what="report", inputs=inputs)
    with atomic_path(path) as temp:
        temp.write_text(document, encoding="utf-8")
