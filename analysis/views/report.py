"""One self-contained HTML report: what it describes, what the log holds, the sweep, the
plots, who gets dropped.

Everything is inline (figures as base64 PNG, styles in the page), so the file opens
anywhere without a network. Outcome names and numbers read as the command line prints
them (``cli/render.py``), so a figure in the report can be found again in a terminal.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from analysis.engine import PARETO_NOTE, PreparedLog, ReplayResult, SweepResult
from analysis.engine.run_loop.sweep import RUN_LOOP_ENGINE, LoopSetting
from analysis.errors import render
from analysis.output.atomic import atomic_path
from analysis.output.checks import check_output
from analysis.rules.policies import PolicySweep
from analysis.table.limits import printable
from analysis.views._figures import tool_version
from analysis.views.bias import OUTCOME_WORDS, BiasReport
from analysis.views.inspection import LogInspection
from analysis.views.tables import (
    m_not_applied_note,
    number,
    policy_sweep_table,
    run_policy_note,
    run_sweep_note,
    sweep_caption,
    sweep_table,
)

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; color: #222;
       padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: 0.5rem; }
h2 { font-size: 1.25rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
h3 { font-size: 1rem; margin: 1rem 0 0.25rem; }
table { border-collapse: collapse; font-size: 0.8rem; margin: 0.5rem 0; }
caption { text-align: left; font-weight: 600; padding: 0.2rem 0; }
th, td { padding: 0.2rem 0.6rem; border-bottom: 1px solid #eee; text-align: right;
         font-variant-numeric: tabular-nums; }
th:first-child, td:first-child { text-align: left; }
tr.pareto td { font-weight: 600; background: #f3f8ff; }
table.about { font-size: 0.9rem; }
table.about th { text-align: left; font-weight: 600; white-space: nowrap; max-width: none;
                 vertical-align: top; color: #555; }
table.about td { text-align: left; }
code { font-size: 0.85rem; background: #f6f6f6; padding: 0.1rem 0.3rem; border-radius: 3px;
       overflow-wrap: anywhere; }
nav { font-size: 0.9rem; margin: 1rem 0; }
nav ol { margin: 0.25rem 0; padding-left: 1.5rem; } nav ol ol { font-size: 0.85rem; }
figure { margin: 1.5rem 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85rem; color: #555; margin-top: 0.25rem; }
.note { color: #555; font-size: 0.85rem; }
.side { display: flex; flex-wrap: wrap; gap: 0 3rem; align-items: flex-start; }
.wide { overflow-x: auto; } .wide th { white-space: normal; max-width: 5.5rem; vertical-align: bottom; }
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

NOT_PROBLEMS = frozenset({"numeric_labels_misordered_by_sorting"})
"""Data-quality counts the report leaves out, as ``inspect`` does (the same set as
``cli/render.py``'s ``_NOT_PROBLEMS``; the library may not import the CLI): versions are
ordered by first observation, not by sorting, so these are not defects."""


@dataclass(frozen=True)
class ReportContent:
    """What a report shows, computed (:func:`analysis.build_report` runs the replays):
    the sweep, the setting looked at closely and why, its replays per K, who it drops,
    and the policies' sweep when asked for."""

    swept: SweepResult
    focus: ReplayResult | LoopSetting
    chosen: str
    """Why ``focus`` is the setting looked at closely, in words."""
    per_k: Sequence[ReplayResult] | Sequence[LoopSetting]
    """Every K under the focus setting's M (replayed as the figure reads them)."""
    bias: BiasReport | None
    """Who gets dropped (the simple loop's); None for a run folder on its own loop, whose
    report shows the focus replay's decisions instead."""
    policies: PolicySweep | None = None


def render_report(
    prepared: PreparedLog,
    inspection: LogInspection,
    content: ReportContent,
    *,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    batch_groups: int | None = None,
    title: str = "dressage-replay report",
    say: Callable[[str, str | None], str] | None = None,
    inputs: Sequence[str | Path] = (),
    command: str | None = None,
    version: str | None = None,
    written_at: datetime | None = None,
) -> str:
    """The report as one HTML document, of results computed beforehand; ``say`` words the
    settings its notes name (the command line passes its flags; by default the library's
    keywords).

    The header says what the report describes: ``inputs`` (as given), the settings grid,
    ``version`` (default: the installed one), ``written_at`` (default: now; shown in UTC)
    and ``command``, the command line that writes it again (left out when not given).
    """
    from analysis.views import plots

    swept, focus, chosen, per_k = content.swept, content.focus, content.chosen, content.per_k
    config = focus.config
    counted = focus if isinstance(focus, LoopSetting) else prepared
    figures = [
        ("fig-sweep", "Tokens kept and version gap against K", plots.plot_sweep(swept)),
        ("fig-heatmap", "Tokens kept over the K x M grid", plots.plot_heatmap(swept)),
        ("fig-spans", "Trajectory version spans, all vs kept", plots.plot_spans(counted, focus)),
        ("fig-gaps", "Version gaps of kept trajectories for each K",
         plots.plot_gaps(prepared, per_k)),
        ("fig-timeline", "Per emitted batch", plots.plot_timeline(focus)),
    ]  # fmt: skip
    bias = content.bias
    limit = "none" if config.max_preempts is None else config.max_preempts
    setting = f"K={config.keep_versions}, M={limit}, B={config.batch_groups}"
    on = (
        f"on Dressage's {focus.replay.loop} loop"
        if isinstance(focus, LoopSetting)
        else "on the simple loop"
    )
    batch = (
        f"{batch_groups:,}"
        if batch_groups is not None
        else f"the run's own: {config.batch_groups:,}"
        if isinstance(focus, LoopSetting)
        else f"inferred: {config.batch_groups:,}"
    )
    about = _about_table(
        inputs=[str(path) for path in inputs],
        grid=[
            ("K (keep versions)", ", ".join(map(str, keep_versions))),
            (
                "M (max preempts)",
                ", ".join("none" if m is None else str(m) for m in max_preempts)
                or f"the run's own: {limit}",  # a run folder swept at its own M only
            ),
            ("B (batch groups)", batch),
        ],
        version=tool_version() if version is None else version,
        written_at=written_at or datetime.now(UTC),
        command=command,
    )
    said = focus.notes if isinstance(focus, LoopSetting) else focus.summary.notes
    notes = [note if say is None else render(note, say) for note in said]
    run_notes = [run_sweep_note(swept.rows), *filter(None, [m_not_applied_note(swept.rows)])]
    sections = [
        ("log", "The log", [_facts_tables(inspection)]),
        ("settings", "Settings compared", [
            _sweep_table(swept.rows), f"<p class='note'>{html.escape(PARETO_NOTE)}</p>",
            *(f"<p class='note'>{html.escape(note)}</p>" for note in run_notes
              if swept.engine == RUN_LOOP_ENGINE),
        ]),
        ("figures", "Figures", [
            f"<p class='note'>Single-setting figures use {html.escape(setting)}: "
            f"{html.escape(chosen)}; every figure replayed {html.escape(on)}.</p>",
            *(_figure(anchor, caption, figure) for anchor, caption, figure in figures),
        ]),
        ("bias", f"Who gets dropped ({setting})", [
            _bias_table(bias.table), _never_batched(bias.never_batched),
        ]) if bias is not None else ("decisions", f"Decisions ({setting}, {on})", [
            _run_decisions(focus),
        ]),
        *([("notes", f"Notes ({setting})", [
            "".join(f"<p class='note'>{html.escape(note)}</p>" for note in notes),
        ])] if notes else []),
        *([_policies_section(content.policies)] if content.policies is not None else []),
    ]  # fmt: skip
    contents = _contents(
        [(anchor, heading) for anchor, heading, _ in sections],
        {"figures": [(anchor, caption) for anchor, caption, _ in figures]},
    )
    names = ", ".join(Path(path).name for path in inputs)
    page_title = f"{title}: {names}" if names else title
    parts = [
        f"<header id='about'><h1>{html.escape(title)}</h1>{about}</header>",
        contents,
        *(
            f"<section id='{anchor}'><h2>{html.escape(heading)}</h2>\n" + "\n".join(body)
            + "</section>"
            for anchor, heading, body in sections
        ),
    ]  # fmt: skip
    # A name that is not UTF-8 (an input's, the command's) keeps its bytes as \xff escapes:
    # Python reads it as lone surrogates, which no UTF-8 file takes (issue 34).
    return printable(
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(page_title)}</title><style>{_STYLE}</style>"
        f"<script>{_CHECK_SCRIPT}</script></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


def _policies_section(swept: PolicySweep) -> tuple[str, str, list[str]]:
    """Other systems' rules on the same log: the policy sweep as ``sweep --policy`` prints
    it, and its figure (``plot sweep --policy``)."""
    from analysis.views.policy_plots import plot_policies  # matplotlib: when drawn

    headers, body = policy_sweep_table(swept.rows)
    classes = ["pareto" if efficient else "" for efficient in swept.rows["pareto"].to_list()]
    return (
        "policies",
        "Other systems' rules",
        [
            "<p class='note'>"
            + (
                "Each policy on the run's own loop (docs/semantics.md §12.9)"
                if run_policy_note(swept.rows)
                else "Each policy as docs/semantics.md §13 replays it, on the same log and B"
            )
            + "; tok. columns weight each trajectory by its response tokens (§10.6).</p>",
            _table(headers, body, caption=sweep_caption(swept.rows), row_classes=classes),
            f"<p class='note'>{html.escape(PARETO_NOTE)}</p>",
            *(
                f"<p class='note'>{html.escape(said)}</p>"
                for said in filter(None, [run_policy_note(swept.rows)])
            ),
            _figure(
                "fig-policies",
                "Tokens kept against version gap, and groups lost, per policy",
                plot_policies(swept),
            ),
        ],
    )


def _about_table(
    *,
    inputs: Sequence[str],
    grid: Sequence[tuple[str, str]],
    version: str,
    written_at: datetime,
    command: str | None,
) -> str:
    """What the report describes: inputs, settings grid, version, date, how to write it again."""
    stamp = written_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows = [
        ("inputs" if len(inputs) != 1 else "input",
         "<br>".join(f"<code>{html.escape(path)}</code>" for path in inputs) or "-"),
        *((name, html.escape(values)) for name, values in grid),
        ("dressage-replay version", html.escape(version)),
        ("written (UTC)", f"<time datetime='{stamp}'>{stamp}</time>"),
        *([("to reproduce", f"<code>{html.escape(command)}</code>")] if command else []),
    ]  # fmt: skip
    body = "".join(f"<tr><th>{html.escape(name)}</th><td>{cell}</td></tr>" for name, cell in rows)
    return f"<table class='about'>{body}</table>"


def _contents(
    sections: Sequence[tuple[str, str]], children: dict[str, Sequence[tuple[str, str]]]
) -> str:
    """The table of contents: a link to each section, and to the figures inside theirs."""

    def link(anchor: str, text: str) -> str:
        return f"<a href='#{anchor}'>{html.escape(text)}</a>"

    items = []
    for anchor, heading in sections:
        inner = "".join(f"<li>{link(a, text)}</li>" for a, text in children.get(anchor, ()))
        items.append(f"<li>{link(anchor, heading)}{f'<ol>{inner}</ol>' if inner else ''}</li>")
    return f"<nav id='contents'><strong>Contents</strong><ol>{''.join(items)}</ol></nav>"


def _figure(anchor: str, caption: str, figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    return (
        f"<figure id='{anchor}'>"
        f"<img alt='{html.escape(caption)}' src='data:image/png;base64,{encoded}'>"
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def _facts_tables(inspection: LogInspection) -> str:
    """What the log holds and its data-quality counts, as ``inspect`` prints them."""
    facts: list[tuple[str, str]] = [
        (key.replace("_", " "), number(inspection.to_dict()[key]))
        for key in ("sources", "records", "groups", "trajectories", "segments", "trainer_steps")
    ]
    if inspection.eval_records:
        facts.append(("of them evaluation", f"{inspection.eval_groups:,} groups, "
                      f"{inspection.eval_records:,} records"))  # fmt: skip
    if inspection.attempt_groups:
        facts.append(("of them Dressage attempts", number(inspection.attempt_groups)))
    facts += [
        (
            "format",
            (", ".join(inspection.formats) or "-")
            + (
                f" (converted from {', '.join(inspection.converted_from)})"
                if inspection.converted_from
                else ""
            ),
        ),
        (
            ("inferred batch groups", number(inspection.inferred_batch_groups, none="n/a"))
            if inspection.run_batch_groups is None
            else ("batch groups (the run's)", number(inspection.run_batch_groups))
        ),
        *(
            [
                (
                    "thrown away (surplus)",
                    f"{number(thrown.groups)} groups, {number(thrown.trajectories)} "
                    f"trajectories, {number(thrown.response_tokens)} tokens",
                )
            ]
            if (thrown := inspection.thrown_away) is not None
            else []
        ),
        ("versions observed", number(len(inspection.versions))),
    ]
    quality = [
        (key.replace("_", " "), number(value))
        for key, value in inspection.quality.items()
        if key not in NOT_PROBLEMS
    ]
    shown = ", ".join(inspection.versions[:20])
    more = len(inspection.versions) - 20
    versions = (
        f"Versions in observation order ({len(inspection.versions):,}): {shown or 'none'}"
        + (f", ... ({more:,} more)" if more > 0 else "")
    )
    warnings = "".join(
        f"<p class='note'>warning: {html.escape(warning)}</p>" for warning in inspection.warnings
    )
    tables = _table([], facts, caption="Log") + _table([], quality, caption="Data quality")
    return (
        f"<div class='side'>{tables}</div>{_limits(inspection.limits)}"
        f"{_thrown_away(inspection)}"
        f"<p class='note'>{html.escape(versions)}</p>{warnings}"
    )


def _thrown_away(inspection: LogInspection) -> str:
    """A fully-async run folder's surplus: generation its loop threw away, in all and per
    call (docs/semantics.md §12.4)."""
    thrown = inspection.thrown_away
    if thrown is None:
        return ""
    said = (
        f"Thrown away: {thrown.groups:,} groups, {thrown.trajectories:,} trajectories, "
        f"{thrown.response_tokens:,} response tokens: generation the fully-async loop "
        "polled and did not need once its batch was full, gone when its call returned "
        f"(counted by replaying the run at {inspection.thrown_away_setting})."
    )
    rows = [[str(r), number(g), number(t), number(n)] for r, g, t, n in thrown.per_call]
    table = (
        _table(
            ["call", "groups", "trajectories", "response tokens"],
            rows,
            caption="Thrown away per rollout call (calls that threw any away)",
        )
        if rows
        else ""
    )
    return f"<h3 id='thrown-away'>Generation thrown away</h3><p>{html.escape(said)}</p>{table}"


def _limits(limits: Sequence[str]) -> str:
    """What another system's log can and cannot tell, as ``inspect`` lists it."""
    if not limits:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in limits)
    return f"<h3 id='limits'>What this log can and cannot tell</h3><ul>{items}</ul>"


def _sweep_table(rows: pl.DataFrame) -> str:
    """The sweep as ``sweep`` prints it (:func:`analysis.views.tables.sweep_table`)."""
    headers, body = sweep_table(rows)
    classes = ["pareto" if efficient else "" for efficient in rows["pareto"].to_list()]
    return _table(headers, body, caption=sweep_caption(rows), row_classes=classes)


def _run_decisions(focus: ReplayResult | LoopSetting) -> str:
    """The focus replay's decisions by attempt and by trajectory, as ``replay RUN``
    prints them (a run folder: who gets dropped compares the simple loop's groups)."""
    assert isinstance(focus, LoopSetting)
    figures = focus.replay.to_dict()
    groups, trajectories = figures["groups"], figures["trajectories"]
    words = {**OUTCOME_WORDS, "dropped_stale_arrival": "stale, arrival",
             "dropped_stale_pending": "stale, pending"}  # fmt: skip
    body = [
        [words.get(key, key.replace("_", " ")), number(groups[key]), number(trajectories[key])]
        for key in groups
        if key == "total" or (key != "dropped_stale" and (groups[key] or trajectories[key]))
    ]
    note = (
        "<p class='note'>Who gets dropped (length, reward, arrival delay) is compared on "
        "the simple loop only: <code>replay RUN --format artifacts --bias</code>.</p>"
    )
    return _table(["decision", "groups", "trajectories"], body) + note


def _bias_table(frame: pl.DataFrame) -> str:
    """Who gets dropped in ``replay``'s outcome words, columns as ``print_bias`` orders them."""
    headers = [
        "outcome", "groups", "trajectories", "tokens per traj. mean", "tokens per traj. median",
        "segments per traj.", "reward mean", "arrival delay (versions)",
    ]  # fmt: skip
    body = [
        [
            OUTCOME_WORDS.get(row["outcome"], row["outcome"]),
            number(row["groups"]),
            number(row["trajectories"]),
            number(row["tokens_per_trajectory_mean"]),
            number(row["tokens_per_trajectory_median"]),
            number(row["segments_per_trajectory_mean"], 2),
            number(row["reward_mean"], 3),
            number(row["arrival_delay_mean"], 2),
        ]
        for row in frame.iter_rows(named=True)
    ]
    return _table(headers, body)


def _never_batched(groups: Sequence[str], *, shown: int = 200) -> str:
    listed = ", ".join(groups[:shown]) + (
        f", ... ({len(groups) - shown:,} more)" if len(groups) > shown else ""
    )
    return (
        f"<p class='note'>Groups that never reached a batch ({len(groups):,}): "
        f"{html.escape(listed or 'none')}</p>"
    )


def _table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    caption: str = "",
    row_classes: Sequence[str] = (),
) -> str:
    """An HTML table of cells already worded; no header row when ``headers`` is empty."""
    head = (
        "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers) + "</tr></thead>"
        if headers
        else ""
    )
    body = []
    for position, row in enumerate(rows):
        css = row_classes[position] if position < len(row_classes) else ""
        cells = "".join(f"<td>{html.escape(cell)}</td>" for cell in row)
        body.append(f"<tr class='{css}'>{cells}</tr>" if css else f"<tr>{cells}</tr>")
    title = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<div class='wide'><table>{title}{head}<tbody>{''.join(body)}</tbody></table></div>"


REPORT_FORMATS = (".html", ".htm")
"""What a report may be written as."""


def write_report(document: str, path: Path, *, inputs: Sequence[Path] = ()) -> None:
    """Write the report atomically; refuse a path that is one of the inputs."""
    path = Path(path)
    check_output(path, REPORT_FORMATS, what="report", inputs=inputs)
    with atomic_path(path) as temp:
        temp.write_text(document, encoding="utf-8")
