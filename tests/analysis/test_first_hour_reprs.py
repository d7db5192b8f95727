"""What a notebook shows of a run folder and of a loaded log (issue 33): one line, with
the tables behind ``_repr_html_``."""

from __future__ import annotations

from pathlib import Path

import analysis


def test_a_run_and_a_loaded_log_have_short_reprs(
    run_folders: dict[str, Path], small_logs: dict[str, Path]
) -> None:
    run = analysis.read_run(run_folders["k2-m1"])
    loaded = analysis.load_log(small_logs["jsonl"])
    for value in (run, loaded):
        assert len(repr(value)) < 200, type(value).__name__
        assert "<table" in value._repr_html_()
    assert f"{run.attempts.height} attempts" in repr(run)
    assert f"{run.trainer_steps} trainer steps" in repr(run) and run.trainer_steps > 1
    assert f"{loaded.table.height} records" in repr(loaded)
