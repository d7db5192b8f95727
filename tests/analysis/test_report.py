"""The report built from the library: what its header says without the command line."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import analysis

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "rollouts.jsonl"


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return analysis.load_logs([SAMPLE])


def _build(table: pl.DataFrame, **header: Any) -> str:
    return analysis.build_report(
        analysis.prepare(table), table, analysis.inspect_log(table),
        keep_versions=[0, 2], max_preempts=[None], **header,
    )  # fmt: skip


def test_library_callers_need_no_header_arguments(table: pl.DataFrame) -> None:
    """Callers from before the header still work; the header has no command to reproduce."""
    document = _build(table)
    assert "<th>inputs</th><td>-</td>" in document
    assert "<th>B (batch groups)</th><td>inferred: 4</td>" in document
    assert "to reproduce" not in document


def test_header_shows_what_it_is_given(table: pl.DataFrame) -> None:
    written = datetime(2025, 3, 4, 6, 7, 8, tzinfo=timezone(timedelta(hours=1)))
    document = _build(
        table, inputs=["a.jsonl", Path("runs/b.jsonl")], version="9.9", written_at=written,
        command="dressage-replay report a.jsonl runs/b.jsonl -o r.html",
    )  # fmt: skip
    assert "<code>a.jsonl</code><br><code>runs/b.jsonl</code>" in document
    assert "<title>dressage-replay report: a.jsonl, b.jsonl</title>" in document
    assert "<th>K (keep versions)</th><td>0, 2</td>" in document
    assert "<th>M (max preempts)</th><td>none</td>" in document
    assert "<th>dressage-replay version</th><td>9.9</td>" in document
    assert "datetime='2025-03-04T05:07:08Z'" in document  # said in UTC
    assert "<code>dressage-replay report a.jsonl runs/b.jsonl -o r.html</code>" in document


def _acts(rows: pl.DataFrame) -> pl.DataFrame:
    """Rows where K is on and drops, and M is on and rejects."""
    return rows.filter(
        (pl.col("keep_versions") > 0)
        & (pl.col("dropped_stale_pct") > 0)
        & pl.col("max_preempts").is_not_null()
        & (pl.col("rejected_span_pct") > 0)
    )


def test_focus_prefers_both_controls_on_and_acting_among_pareto_settings(
    table: pl.DataFrame,
) -> None:
    """With K off, the per-batch drop panel is empty: a 5,000-group report once focused on
    K=0, M=3 although K=4, M=3 was Pareto-efficient and kept as much. And a K that drops
    nothing decides as K off: the sample's report once featured K=4, M=3, which drops no
    stale group. Of the Pareto settings where both controls act, the one keeping most."""
    prepared = analysis.prepare(table)
    swept = analysis.sweep(prepared, keep_versions=[0, 1, 2, 3, 4], max_preempts=[None, 0, 1, 2, 3])
    rows = swept.rows.filter(pl.col("pareto"))
    both = rows.filter((pl.col("keep_versions") > 0) & pl.col("max_preempts").is_not_null())
    acting = _acts(rows)
    assert acting.height, "the sample should have a Pareto setting where both controls act"
    assert both["tokens_kept_pct"].max() > acting["tokens_kept_pct"].max(), (  # type: ignore[operator]
        "the sample should also have a Pareto setting with a control that decides nothing "
        "keeping more (else this test tells nothing)"
    )
    config = analysis.focus_setting(swept).config
    chosen = acting.filter(
        (pl.col("keep_versions") == config.keep_versions)
        & (pl.col("max_preempts") == config.max_preempts)
    )
    assert chosen["tokens_kept_pct"].item() == acting["tokens_kept_pct"].max()


def test_report_says_when_a_featured_control_decides_nothing(table: pl.DataFrame) -> None:
    """Only settings where K drops nothing are swept: the report says the featured K
    decides as K off, in words."""
    prepared = analysis.prepare(table)
    swept = analysis.sweep(prepared, keep_versions=[0, 40], max_preempts=[None])
    assert swept.rows.filter(pl.col("keep_versions") == 40)["dropped_stale_pct"].item() == 0
    content = analysis.report_content(prepared, table, keep_versions=[0, 40], max_preempts=[None])
    assert content.focus.config.keep_versions == 40
    assert "K=40 drops no stale group on this log, so it decides as K off" in content.chosen
    acting = analysis.report_content(prepared, table, keep_versions=[1], max_preempts=[None])
    assert "decides as" not in acting.chosen


def test_focus_falls_back_to_one_control_when_none_has_both(table: pl.DataFrame) -> None:
    swept = analysis.sweep(analysis.prepare(table), keep_versions=[0], max_preempts=[None, 1, 2])
    config = analysis.focus_setting(swept).config
    assert config.keep_versions == 0 and config.max_preempts is not None
