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


def test_focus_prefers_both_controls_on_among_pareto_settings(table: pl.DataFrame) -> None:
    """With K off, the per-batch drop panel is empty: a 5,000-group report once focused on
    K=0, M=3 although K=4, M=3 was Pareto-efficient and kept as much."""
    prepared = analysis.prepare(table)
    swept = analysis.sweep(prepared, keep_versions=[0, 1, 2, 3, 4], max_preempts=[None, 0, 1, 2, 3])
    rows = swept.rows.filter(pl.col("pareto"))
    both = rows.filter((pl.col("keep_versions") > 0) & pl.col("max_preempts").is_not_null())
    assert both.height, "the sample should have a Pareto setting with both controls on"
    config = analysis.focus_setting(swept).config
    assert config.keep_versions > 0 and config.max_preempts is not None
    best = both["tokens_kept_pct"].max()
    chosen = both.filter(
        (pl.col("keep_versions") == config.keep_versions)
        & (pl.col("max_preempts") == config.max_preempts)
    )
    assert chosen["tokens_kept_pct"].item() == best


def test_focus_falls_back_to_one_control_when_none_has_both(table: pl.DataFrame) -> None:
    swept = analysis.sweep(analysis.prepare(table), keep_versions=[0], max_preempts=[None, 1, 2])
    config = analysis.focus_setting(swept).config
    assert config.keep_versions == 0 and config.max_preempts is not None
