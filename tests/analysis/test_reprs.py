"""Results read well in a notebook: a short repr, and a table where a table helps (a new
user's print(sweep_result) dumped kilobytes)."""

from __future__ import annotations

from pathlib import Path

import analysis


def test_results_have_short_reprs_and_html_tables(small_logs: dict[str, Path]) -> None:
    prepared = analysis.prepare(analysis.load_logs([small_logs["jsonl"]]))
    result = analysis.replay(prepared, analysis.ReplayConfig(keep_versions=1, max_preempts=1))
    swept = analysis.sweep(prepared, keep_versions=range(4), max_preempts=[None, 0, 1, 2])
    for value in (prepared, result, result.summary, swept):
        assert len(repr(value)) < 200, type(value).__name__
    assert "groups kept" in repr(result) and "K=1, M=1" in repr(result)
    assert "16 settings" in repr(swept)
    for value in (result, result.summary, swept):
        assert "<table" in value._repr_html_()
