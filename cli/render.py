"""Rich renderings of library results for the terminal; the library itself never prints."""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from analysis import (
    ENGINE_WORDS,
    PARETO_NOTE,
    Outcome,
    k_label,
    m_label,
    m_not_applied_note,
    policy_sweep_table,
    run_policy_note,
    run_sweep_note,
    sweep_caption,
    sweep_table,
)
from cli.flags import flagged

if TYPE_CHECKING:  # only named in annotations: a replay need not import the run readers
    from analysis import (
        AdmissionReport,
        BiasReport,
        CompareResult,
        Fit,
        LogInspection,
        ReplaySummary,
        SweepResult,
        ThrownAway,
    )

OUTCOME_COLUMNS = tuple((outcome.key, outcome.words) for outcome in Outcome)


def _shortened(label: str, most: int = 60) -> str:
    """A label as a line shows it: a long one cut, with its length (the terminal would
    take minutes to wrap a label of millions of characters, and no one would read it)."""
    if len(label) <= most:
        return label
    return f"{label[: most - 20]}... ({len(label):,} characters)"


def outcome_cell(value: int | None, total: int | None) -> str:
    if value is None:
        return "n/a"
    if not total:
        return f"{value:,}"
    return f"{value:,} {100 * value / total:.1f}%"


def shown_number(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}" if isinstance(value, float) else f"{value:,}"


def _fitted_parts(
    console: Console,
    table: Callable[[Sequence[int], str, Sequence[Sequence[str]]], Table],
    count: int,
    rows: Sequence[Sequence[str]],
    *,
    keys: int,
) -> list[list[int]]:
    """The columns of each table a table of ``count`` columns is cut into to fit."""
    # Measured on one row of each column's widest cell: a sweep may have thousands of rows.
    widest = [max((row[i] for row in rows), key=len, default="") for i in range(count)]

    def fits(columns: Sequence[int]) -> bool:
        options = console.options.update(max_width=10_000)
        measured = Measurement.get(console, options, table(columns, "", [widest]))
        return measured.maximum <= console.width

    if fits(range(count)):
        return [list(range(count))]
    parts: list[list[int]] = [list(range(keys))]
    for column in range(keys, count):
        if fits([*parts[-1], column]) or len(parts[-1]) == keys:
            parts[-1].append(column)
        else:
            parts.append([*range(keys), column])
    return parts


def print_fitted(
    console: Console,
    title: str,
    headers: Sequence[tuple[str, str]],
    rows: Sequence[Sequence[str]],
    *,
    keys: int,
) -> None:
    """A table printed whole, as several tables if its columns do not fit the terminal,
    each repeating the first ``keys`` columns (rich would shrink columns to "3…" and drop
    the key ones). Piped output is 120 columns wide, where the tables here fit as one."""

    def table(columns: Sequence[int], part: str, shown_rows: Sequence[Sequence[str]]) -> Table:
        shown = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=title + part, title_justify="left")
        for i in columns:
            header, justify = headers[i]
            shown.add_column(header, justify=justify, no_wrap=True)  # type: ignore[arg-type]
        for row in shown_rows:
            shown.add_row(*(row[i] for i in columns))
        return shown

    parts = _fitted_parts(console, table, len(headers), rows, keys=keys)
    for number, columns in enumerate(parts, start=1):
        part = "" if len(parts) == 1 else f" ({number} of {len(parts)})"
        shown = table(columns, part, rows)
        if len(title + part) > console.measure(shown).maximum:
            # a title wider than its part's table: on a line of its own, not wrapped to it
            shown.title = None
            console.print(title + part, highlight=False, style="table.title")
        console.print(shown)


def print_summary(
    summary: ReplaySummary,
    console: Console,
    *,
    policy: str | None = None,
    clock: str | None = None,
) -> None:
    """Print one replay's summary as a table of outcomes plus staleness figures; ``policy``
    (a peer rule's spec, docs/semantics.md §13) titles it instead of K and M, with the
    ``clock`` it ran on (§13.2)."""
    config = summary.config

    title = (  # a control that is off: K off, M none (as the policy label and the plots)
        f"Simple loop: keep_versions={k_label(config.keep_versions)}  "
        f"max_preempts={m_label(config.max_preempts)}  "
        f"batch_groups={config.batch_groups}"
    )
    if policy is not None:
        title = f"Simple loop: {policy.partition(':')[0]}  batch_groups={config.batch_groups}"
        title += f"  clock={clock}" if clock is not None else ""
    headers = [("outcome", "left"), *((unit, "right") for unit in summary.counts)]
    rows = [["total", *(outcome_cell(c["total"], None) for c in summary.counts.values())]]
    for key, label in OUTCOME_COLUMNS:
        rows.append([label, *(outcome_cell(c[key], c["total"]) for c in summary.counts.values())])
    print_fitted(console, title, headers, rows, keys=1)

    gap, span = summary.version_gap, summary.version_span
    batches = summary.batches
    cutoff = (
        f", cutoff index {shown_number(summary.cutoff_version_index)}" if policy is None else ""
    )
    lines = [
        *([f"policy              {policy}"] if policy is not None else []),
        f"batches emitted     {batches['emitted']}"
        + ("  (last one partial)" if batches["last_partial"] else ""),
        # the replay's own count (a span-rejected group is never observed, semantics §4);
        # `inspect` counts every version in the log
        f"versions observed   {len(summary.versions)}"
        f"  (by this replay; current index {shown_number(summary.current_version_index)}{cutoff})",
        f"version gap, kept   min {shown_number(gap['min'])}  mean {shown_number(gap['mean'])}"
        f"  max {shown_number(gap['max'])}  (per trajectory)",
        f"version span, kept  min {shown_number(span['kept']['min'])}  mean"
        f" {shown_number(span['kept']['mean'])}  max {shown_number(span['kept']['max'])}",
        f"version span, all   min {shown_number(span['all']['min'])}  mean"
        f" {shown_number(span['all']['mean'])}  max {shown_number(span['all']['max'])}",
        _token_weighted_line(summary.token_weighted),
    ]
    if summary.unchecked_trajectories:
        lines.append(
            f"trajectories without token versions (span not checked): "
            f"{summary.unchecked_trajectories:,}"
        )
    for line in lines:
        console.print(line, highlight=False)
    for note in summary.notes:
        console.print(f"note: {flagged(note)}", style="dim", highlight=False)


def _token_weighted_line(figures: dict[str, float | None]) -> str:
    """The means above with each trajectory weighted by its response tokens (§10.6)."""
    return (
        f"by response tokens  gap mean, kept {shown_number(figures.get('version_gap_mean'))}"
        f"  span mean, kept {shown_number(figures.get('version_span_mean_kept'))}"
        f"  all {shown_number(figures.get('version_span_mean_all'))}"
    )


_NOT_PROBLEMS = frozenset({"numeric_labels_misordered_by_sorting"})
"""Counts in ``--json`` that are not data-quality problems (versions are ordered by first
observation, not by sorting): left out of the table, where they read as defects."""


def _thrown_cell(thrown: ThrownAway) -> str:
    return f"{thrown.groups:,} groups, {thrown.trajectories:,} traj., {thrown.response_tokens:,} tokens"


def thrown_away_words(thrown: ThrownAway) -> str:
    """The generation the fully-async loop threw away, in words, with its worst call."""
    words = (
        f"{thrown.groups:,} groups, {thrown.trajectories:,} trajectories, "
        f"{thrown.response_tokens:,} response tokens"
    )
    if thrown.per_call:
        worst = max(thrown.per_call, key=lambda row: (row[1], -row[0]))
        words += f"; most in one call: {worst[1]:,} groups (call {worst[0]})"
    return words


def print_inspection(inspection: LogInspection, console: Console) -> None:
    """Print what a log holds and its data-quality counts (its warnings go to stderr)."""
    facts = Table(show_header=False, title="Log", title_justify="left")
    facts.add_column("what")
    facts.add_column("value", justify="right")
    info = inspection.to_dict()
    for key in ("sources", "records", "groups", "trajectories", "segments", "trainer_steps"):
        facts.add_row(key.replace("_", " "), f"{info[key]:,}")  # a run folder's: its own
    if inspection.eval_records:
        facts.add_row("of them evaluation", f"{inspection.eval_groups:,} groups, "
                      f"{inspection.eval_records:,} records")  # fmt: skip
    if inspection.attempt_groups:  # records without a group id, grouped by attempt key
        facts.add_row("of them Dressage attempts", f"{inspection.attempt_groups:,}")
    converted = f" (converted from {', '.join(inspection.converted_from)})"
    facts.add_row(
        "format",
        (", ".join(inspection.formats) or "-") + (converted if inspection.converted_from else ""),
    )
    if inspection.run_batch_groups is not None:  # a run folder: B from its dressage_log.txt
        facts.add_row("batch groups (the run's)", f"{inspection.run_batch_groups:,}")
        facts.add_row("settings replayed on", ENGINE_WORDS.get(inspection.settings_engine, "-"))
    else:
        facts.add_row("inferred batch groups", shown_number(inspection.inferred_batch_groups))
    if inspection.thrown_away is not None:  # a fully-async run folder: its loop's surplus
        facts.add_row("thrown away (surplus)", _thrown_cell(inspection.thrown_away))
    console.print(facts)
    if inspection.thrown_away is not None:
        console.print(
            "thrown away: generation the fully-async loop polled and did not need, gone when "
            f"its call returned: {thrown_away_words(inspection.thrown_away)}; counted by "
            f"replaying the run at {inspection.thrown_away_setting}",
            highlight=False,
        )

    quality = Table(show_header=False, title="Data quality", title_justify="left")
    quality.add_column("what")
    quality.add_column("count", justify="right")
    for key, value in inspection.quality.items():
        if key not in _NOT_PROBLEMS:
            quality.add_row(key.replace("_", " "), f"{value:,}")
    console.print(quality)

    if inspection.limits:  # another system's log: what it carries and cannot tell
        console.print("What this log can and cannot tell:", highlight=False)
        width = max(console.width - 1, 40)
        for line in inspection.limits:
            text = textwrap.fill(line, width, initial_indent="  - ", subsequent_indent="    ")
            console.print(text, highlight=False, soft_wrap=True, markup=False)
    shown = ", ".join(_shortened(label) for label in inspection.versions[:20])
    more = len(inspection.versions) - 20
    console.print(
        f"versions in observation order ({len(inspection.versions)}): {shown or 'none'}"
        + (f", ... ({more} more)" if more > 0 else ""),
        highlight=False,
    )


def print_admission(
    bounds: Sequence[AdmissionReport], console: Console, *, unchecked: str | None = None
) -> None:
    """Per admission rule: how many groups of the log started beyond its bound, and by how
    much (docs/semantics.md, "Other systems' logs"). ``unchecked``: why a rule that
    checked no group could not (default: the log lacks start versions or trainer steps)."""
    table = Table(title="Admission bounds: groups that would have been held back",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)  # fmt: skip
    for name in ("rule", "offset", "checked", "unknown", "broke it", "max over", "mean over"):
        table.add_column(
            name, justify="left" if name == "rule" else "right",
            overflow="fold" if name == "rule" else "ellipsis",
        )  # fmt: skip
    for bound in bounds:
        found = bound.to_dict()
        broke = (
            f"{found['violations']:,} {found['violations'] / found['checked']:.1%}"
            if found["checked"]
            else "-"  # none checked: no share to give
        )
        table.add_row(
            dataclasses.replace(bound.rule, step_offset=None).spec, f"{found['step_offset']}",
            f"{found['checked']:,}", f"{found['unknown']:,}", broke, _fmt(found["max_over"]),
            _fmt(found["mean_over"], 2),
        )  # fmt: skip
    console.print(table)
    for bound in bounds:
        found = bound.to_dict()
        if found["unknown"] and not found["checked"]:
            console.print(
                f"{found['rule']}: "
                + (
                    unchecked
                    or "no group has both a start version and a trainer step, so none could "
                    "be checked"
                ),
                highlight=False,
            )


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else f"{value:,}"


def print_sweep(result: SweepResult, console: Console) -> None:
    """One row per setting, Pareto-efficient rows starred, the star explained under the table.

    Failed groups (docs/semantics.md §3.2 and §9: an aborted sample) are shown only when
    the log has some; with them the groups' shares add up to 100: kept, stale,
    span-rejected, failed."""
    names, rows = sweep_table(result.rows)
    # Two-line headers in the terminal ("stale, arrival" over "stale" and "arrival").
    headers = [
        (name.replace(", ", "\n").replace(" ", "\n"), "left" if not name else "right")
        for name in names
    ]
    print_fitted(console, sweep_caption(result.rows), headers, rows, keys=3)
    if result.rows.height and result.rows["pareto"].any():
        console.print(PARETO_NOTE, highlight=False)
    if "own_setting" in result.rows.columns:
        console.print(run_sweep_note(result.rows), highlight=False)
        if (not_applied := m_not_applied_note(result.rows)) is not None:
            console.print(not_applied, highlight=False)
    for note in result.notes:  # about the log, as replay prints them
        console.print(f"note: {flagged(note)}", style="dim", highlight=False)


def print_policy_sweep(rows: Any, console: Console) -> None:
    """One row per policy (docs/semantics.md §13), the sweep's columns, the front starred."""
    names, body = policy_sweep_table(rows)
    headers = [
        (name.replace(", ", "\n").replace(" ", "\n"), "left" if name in ("", "policy") else "right")
        for name in names
    ]
    key = names.index("policy")
    short = [[*row[:key], f"P{n}", *row[key + 1 :]] for n, row in enumerate(body, start=1)]
    if len(_measured_parts(console, headers, short)) < len(_measured_parts(console, headers, body)):
        # Long specs in a narrow terminal: a short name in the table, the specs under it.
        print_fitted(console, sweep_caption(rows), headers, short, keys=2)
        for n, row in enumerate(body, start=1):
            console.print(f"P{n}  {row[key]}", highlight=False, soft_wrap=True)
    else:
        print_fitted(console, sweep_caption(rows), headers, body, keys=2)
    if rows.height and rows["pareto"].any():
        console.print(PARETO_NOTE, highlight=False)
    said = run_policy_note(rows)
    if said is not None:
        console.print(said, highlight=False)


def _measured_parts(
    console: Console, headers: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]]
) -> list[list[int]]:
    """How many tables ``rows`` would be printed as (``print_fitted``'s cut)."""

    def table(columns: Sequence[int], part: str, shown_rows: Sequence[Sequence[str]]) -> Table:
        shown = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for i in columns:
            shown.add_column(headers[i][0], justify=headers[i][1], no_wrap=True)  # type: ignore[arg-type]
        for row in shown_rows:
            shown.add_row(*(row[i] for i in columns))
        return shown

    return _fitted_parts(console, table, len(headers), rows, keys=2)


def print_bias(report: BiasReport, console: Console) -> None:
    """Who gets dropped: groups by outcome compared on length, segments, reward, delay."""
    from analysis import OUTCOME_WORDS

    headers = (
        "outcome", "groups", "trajectories", "tokens per\ntraj. mean", "tokens per\ntraj. median",
        "segments\nper traj.", "reward\nmean", "arrival delay\n(versions)",
    )  # fmt: skip
    rows = [
        [
            OUTCOME_WORDS.get(row["outcome"], row["outcome"]),
            _fmt(row["groups"]),
            _fmt(row["trajectories"]),
            _fmt(row["tokens_per_trajectory_mean"]),
            _fmt(row["tokens_per_trajectory_median"]),
            _fmt(row["segments_per_trajectory_mean"], 2),
            _fmt(row["reward_mean"], 3),
            _fmt(row["arrival_delay_mean"], 2),
        ]
        for row in report.table.iter_rows(named=True)
    ]
    aligned = [(header, "left" if header == "outcome" else "right") for header in headers]
    print_fitted(console, "Who gets dropped", aligned, rows, keys=1)
    never = report.never_batched
    if never:
        shown = ", ".join(never[:20]) + (
            f", ... ({len(never) - 20} more)" if len(never) > 20 else ""
        )
        console.print(f"groups that never reached a batch ({len(never)}): {shown}", highlight=False)


def print_compare(result: CompareResult, console: Console) -> None:
    """The two runs' figures side by side, then drift by gap when the logs carry log-probs."""
    first, second = result.names
    rows = []
    for row in result.table.iter_rows(named=True):
        digits = 2 if "(%)" in row["metric"] or "mean" in row["metric"] else 0
        rows.append([row["metric"], _fmt(row[first], digits), _fmt(row[second], digits)])
    headers = [("metric", "left"), (first, "right"), (second, "right")]
    engines = {ENGINE_WORDS.get(e, e) for e in result.engines}
    on = (
        f"on {engines.pop()}"
        if len(engines) == 1
        else "; ".join(
            f"{name} on {ENGINE_WORDS.get(e, e)}"
            for name, e in zip(result.names, result.engines, strict=True)
        )
    )
    print_fitted(console, f"Comparison {on}", headers, rows, keys=1)
    drift = result.drift_by_gap
    if drift.height:
        shown = Table(
            box=box.SIMPLE_HEAD, pad_edge=False, title="Log-prob drift by version gap",
            title_justify="left",
        )  # fmt: skip
        for header in ("run", "version gap", "records", "mean |rollout - trainer| log-prob"):
            shown.add_column(header, justify="left" if header == "run" else "right")
        for row in drift.iter_rows(named=True):
            shown.add_row(
                row["run"], _fmt(row["version_gap"]), _fmt(row["records"]),
                _fmt(row["mean_abs_log_prob_diff"], 4),
            )  # fmt: skip
        console.print(shown)
    for note in result.notes:
        console.print(f"note: {flagged(note)}", style="dim", highlight=False)


def print_fit(fit: Fit, like: Path, console: Console) -> None:
    """``simulate --like``: what was fitted, and the run's figures beside a simulated run's."""
    headers = [("parameter", "left"), ("value", "right"), ("from", "left")]
    rows = [list(row) for row in fit.fitted]
    print_fitted(console, f"Fitted to {like}", headers, rows, keys=1)
    simulated = fit.simulated.groups
    headers = [
        ("figure", "left"),
        ("the run", "right"),
        (f"simulated ({simulated:,} groups)", "right"),
        ("difference", "right"),
    ]
    rows = []
    for (label, real), (_, sim) in zip(fit.log.rows(), fit.simulated.rows(), strict=True):
        if label == "groups" or label == "trajectories":
            difference = ""
        elif real is None or sim is None:
            difference = "not in the run" if real is None else ""
        else:
            change = round(100 * (sim - real) / real) if real else None
            difference = "" if change is None else f"{change:+d}%" if change else "0%"
        rows.append([label, _figure(real), _figure(sim), difference])
    print_fitted(console, "The run's figures and the fitted simulation's", headers, rows, keys=1)
    for note in fit.notes:
        console.print(f"note: {flagged(note)}", soft_wrap=True, highlight=False, markup=False)


def _figure(value: float | int | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
