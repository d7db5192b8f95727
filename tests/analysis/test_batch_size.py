"""B for the simple loop when none is given, in the library (analysis.batch_groups_for):
what the command line prints and refuses comes from here."""

from __future__ import annotations

from pathlib import Path

import pytest

import analysis
from tests.fixtures import peer_logs


def _loaded(path: Path) -> tuple[analysis.PreparedLog, analysis.LoadReport]:
    report = analysis.LoadReport()
    table = analysis.load_logs([path], report=report)
    return analysis.prepare(table), report


def test_a_run_folder_gives_its_own_batch_size(run_folders: dict[str, Path]) -> None:
    folder = run_folders["k2-m1"]
    prepared, report = _loaded(folder)
    assert prepared.inferred_batch_groups is None  # the artifacts carry no trainer step
    found = analysis.batch_groups_for([folder], None, prepared, report)
    assert found == analysis.BatchSize(2, "batch_groups=2, the run's own batch size")
    # Given, it wins and nothing is said.
    assert analysis.batch_groups_for([folder], 5, prepared, report) == analysis.BatchSize(5)


def test_a_run_folder_is_read_within_the_limits(run_folders: dict[str, Path]) -> None:
    folder = run_folders["k2-m1"]
    prepared, report = _loaded(folder)
    tight = analysis.Limits(max_record_bytes=64)
    with pytest.raises(analysis.ReplayError, match="max_record_bytes"):
        analysis.batch_groups_for([folder], None, prepared, report, limits=tight)


def test_a_log_without_steps_is_refused_in_its_own_words(tmp_path: Path) -> None:
    areal = peer_logs.write_all(tmp_path)["areal"]
    prepared, report = _loaded(areal)
    with pytest.raises(analysis.ConfigError, match="AReaL logs record no trainer step") as err:
        analysis.batch_groups_for([areal], None, prepared, report)
    assert str(areal) in str(err.value) and "batch_groups" in str(err.value)


def test_the_fast_read_of_the_batch_size_is_read_runs(
    run_folders: dict[str, Path], tmp_path: Path
) -> None:
    """The batch size read cheaply from dressage_log.txt is the one read_run keeps (the
    last call start's target_groups), not a config line's partial_rollout_target_groups."""
    import shutil

    from analysis.formats.dressage.run import run_target_groups

    run = tmp_path / "run"
    shutil.copytree(run_folders["k2-m1"], run)
    log = run / "dressage_log.txt"
    lines = log.read_text().splitlines(keepends=True)
    stamp = lines[0][:23]
    config = f"{stamp} dressage.config INFO args: partial_rollout_target_groups=7\n"
    log.write_text(config + "".join(lines))
    assert analysis.read_run(run).target_groups == 2
    assert run_target_groups(run) == 2
