"""What a real Dressage run leaves on disk, read by the simple-loop readers (a log, not
the run loop of docs/semantics.md §12): each test is a finding of a new user's first
try on the real runs of tests/fixtures/real_runs/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import analysis


def test_artifacts_without_a_group_id_are_grouped_by_attempt(
    run_folders: dict[str, Path], truth: dict[str, list[dict[str, Any]]]
) -> None:
    """Dressage removes its async group id before writing artifacts; the instance id it
    fell back to merged every epoch and retry of a prompt (12 groups where 43 ran)."""
    table = analysis.load_logs([run_folders["k2-m1"] / "traj_payload"])
    members = table.group_by("group_id").agg("trajectory_id")
    groups = {frozenset(ids) for ids in members["trajectory_id"].to_list()}
    completed = {
        frozenset(set(attempt["session_ids"]) - set(attempt["rejected_sessions"])
                  - set(attempt["failed_sessions"]))
        for attempt in truth["k2-m1"]
    }  # fmt: skip
    assert groups == completed - {frozenset()}
    assert table["group_id"].n_unique() == 47
    # and inspect says how the groups were formed
    assert analysis.inspect_log(table).attempt_groups == 47
    dumps = analysis.load_logs([run_folders["k2-m1"] / "rollout_data"])
    assert analysis.inspect_log(dumps).attempt_groups == 0  # the dumps carry group ids


def test_a_run_folder_reads_both_trees_in_completion_order(
    run_folders: dict[str, Path], truth: dict[str, list[dict[str, Any]]]
) -> None:
    """traj_err/ (the only record of a failed or span-rejected trajectory) was unreadable
    (exit 4), and a single error.json read as a success. Read with traj_payload/, the
    attempts arrive in the order Dressage completed them."""
    report = analysis.LoadReport()
    table = analysis.load_logs([run_folders["k2-m1"]], report=report)
    assert any("Dressage run folder" in w for w in report.warnings)
    assert table["trajectory_id"].n_unique() == 188  # 177 completed + 11 failed
    aborted = set(table.filter(table["status"] == "aborted")["trajectory_id"].to_list())
    expected = {
        session
        for attempt in truth["k2-m1"]
        for session in [*attempt["rejected_sessions"], *attempt["failed_sessions"]]
    }
    assert aborted == expected
    first: dict[str, str] = {}
    for row in table.iter_rows(named=True):
        first.setdefault(row["trajectory_id"], row["group_id"])
    # Attempts drained when the run ended were put on the queue after the worker stopped,
    # in no completion order: the others arrive as Dressage's worker completed them, but
    # for the one pair of completions under 2 ms apart in this run (the proxy's read
    # times in the files come a few ms before the worker's put).
    consumed = sorted(
        (a for a in truth["k2-m1"] if a["outcome"] != "leftover"),
        key=lambda attempt: attempt["completed_seq"],
    )
    wanted = {first[attempt["session_ids"][0]] for attempt in consumed}
    order = [g for g in table["group_id"].unique(maintain_order=True).to_list() if g in wanted]
    truth_order = [first[attempt["session_ids"][0]] for attempt in consumed]
    assert sum(a != b for a, b in zip(order, truth_order, strict=True)) == 2


def test_a_span_rejection_is_read_as_an_aborted_record_with_its_versions(
    run_folders: dict[str, Path],
) -> None:
    errors = sorted((run_folders["k2-m1"] / "traj_err").rglob("error.json"))
    rejected = [path for path in errors if "partial_rollout_staleness_exceeded" in path.read_text()]
    table = analysis.load_logs([rejected[0]])
    row = table.row(0, named=True)
    assert row["status"] == "aborted" and row["end_version"] is None
    body = json.loads(rejected[0].read_text())["http"]["response"]["body"]
    assert len(row["version_spans"]) >= 3 and row["version_spans"][-1]["version"] in body
    assert row["completed_at"] == json.loads(rejected[0].read_text())["timestamp"]


@pytest.mark.parametrize("what", ["rollout_data", "rollouts.jsonl"])
def test_a_log_dressage_had_already_filtered_is_said_to_be(
    run_folders: dict[str, Path], what: str
) -> None:
    """Dumps and JSONL of a Dressage run hold only the groups returned to the trainer, in
    dump order: a replay at the run's own setting dropped groups Dressage kept, unsaid."""
    folder = run_folders["k2-m1"]
    path = folder / what
    if what == "rollouts.jsonl":  # the fixture leaves it out: rebuild it from the dumps
        from analysis.formats.slime_dumps.reader import dump_samples

        lines = []
        for dump in sorted((folder / "rollout_data").glob("*.pt")):
            lines += [json.dumps(sample) for sample in dump_samples(dump, trust_pickle=False)[1]]
        path = folder.parent / "rollouts.jsonl"
        path.write_text("\n".join(lines) + "\n")
    prepared = analysis.prepare(analysis.load_logs([path]))
    assert any("returned to the trainer" in w for w in prepared.warnings)
    artifacts = analysis.prepare(analysis.load_logs([folder / "traj_payload"]))
    assert not any("returned to the trainer" in w for w in artifacts.warnings)


def test_a_missing_batch_size_does_not_suggest_the_samples_rollout_id(
    run_folders: dict[str, Path],
) -> None:
    """In Dressage records a sample's own rollout_id is its index, not a trainer step."""
    prepared = analysis.prepare(analysis.load_logs([run_folders["k2-m1"] / "traj_payload"]))
    with pytest.raises(analysis.ConfigError) as raised:
        analysis.replay(prepared, analysis.ReplayConfig(keep_versions=2))
    message = str(raised.value)
    assert "rollout_id is not one" in message and "batch_groups=B" in message


def test_a_version_seen_after_a_newer_one_is_warned_about(run_folders: dict[str, Path]) -> None:
    """In k3-m2-n8 one attempt brought "8" then "7": "7" became the newest. At K=1 every
    later group at "8" is then stale, and Dressage's loop can starve the trainer."""
    run = analysis.read_run(run_folders["k3-m2-n8"])
    at_one = analysis.replay_run(run, keep_versions=1)
    assert any("livelock" in w and "version 7" in w for w in at_one.warnings)
    at_three = analysis.replay_run(run, keep_versions=3)
    assert not any("livelock" in w for w in at_three.warnings)
    assert any("version 7" in w for w in at_three.warnings)
    records = [
        {"group_index": g, "metadata": {"parent_traj_id": f"t{g}",
                                        "dressage_end_token_version": label}}
        for g, label in enumerate(["1", "2", "4", "3", "4"])
    ]  # fmt: skip
    summary = analysis.replay(
        analysis.records_to_table(records), analysis.ReplayConfig(keep_versions=1, batch_groups=1)
    ).summary
    assert any("version 3 was first observed after 4" in note for note in summary.notes)
