"""Log writers: complete files or none, folders never mixed, gzip headers clean."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import analysis
from analysis.errors import OutputError
from analysis.output.raw_artifacts import write_run_folder
from analysis.output.raw_logs import log_format_for, write_jsonl, write_pt_dumps
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.simulator import simulate


def failing_records(after: int) -> Iterator[dict[str, Any]]:
    for index in range(after):
        yield {"group_index": index}
    raise RuntimeError("the producer broke")


@pytest.mark.parametrize("name", ["log.jsonl", "log.jsonl.gz"])
def test_a_failing_producer_leaves_nothing(tmp_path: Path, name: str) -> None:
    with pytest.raises(RuntimeError, match="producer broke"):
        write_jsonl(failing_records(5_000), tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_jsonl_round_trip_and_gzip_header(tmp_path: Path) -> None:
    records = [{"group_index": i, "metadata": {"x": [i] * 3}} for i in range(1_000)]
    plain, packed = tmp_path / "a.jsonl", tmp_path / "a.jsonl.gz"
    assert write_jsonl(records, plain) == write_jsonl(records, packed) == 1_000
    assert [json.loads(line) for line in plain.read_text().splitlines()] == records
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    header = packed.read_bytes()[:40]
    assert b"a.jsonl\x00" in header and b".tmp" not in header


def test_pt_folder_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "dumps"

    def records() -> Iterator[dict[str, Any]]:
        yield {"group_index": 0, "metadata": {"dressage_return_rollout_id": 0}}
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        write_pt_dumps(records(), target)
    assert list(tmp_path.iterdir()) == []
    write_pt_dumps([{"group_index": 0, "metadata": {"dressage_return_rollout_id": 0}}], target)
    with pytest.raises(OutputError, match="not empty"):
        write_pt_dumps([{"group_index": 1, "metadata": {"dressage_return_rollout_id": 0}}], target)


@pytest.mark.parametrize(
    ("name", "given", "expected"),
    [("r.jsonl", None, "jsonl"), ("r.jsonl.gz", None, "jsonl"), ("r.parquet", None, "parquet"),
     ("folder", "artifacts", "artifacts"), ("folder", "pt", "pt")],
)  # fmt: skip
def test_format_from_the_name(name: str, given: str | None, expected: str) -> None:
    assert log_format_for(Path(name), given) == expected


@pytest.mark.parametrize(
    ("name", "given"), [("r.pt", None), ("r.csv", None), ("r.jsonl", "parquet"), ("r.txt", "jsonl")]
)
def test_format_mismatch_is_refused(name: str, given: str | None) -> None:
    with pytest.raises(OutputError):
        log_format_for(Path(name), given)


# --------------------------------------------------------------------------- Dressage's shapes


def _simulated_run(tmp_path: Path) -> tuple[list[dict[str, Any]], Path]:
    config = SimulationConfig(n_groups=30, n_prompts=4, max_active_groups=3, batch_groups=2,
                              train_step_time=0.3, median_response_tokens=40,
                              multi_turn_fraction=0.6, multi_segment_fraction=0.6,
                              abort_fraction=0.3, seed=2)  # fmt: skip
    records = list(simulate(config))
    assert write_run_folder(records, tmp_path / "run") == len(records)
    return records, tmp_path / "run"


def test_artifacts_are_written_in_dressages_shapes(tmp_path: Path) -> None:
    """Segment files carry no group id, sample index, parent id or reward (Dressage removes
    or never writes them); several attempts share an instance folder; a failed trajectory
    is an error.json in traj_err/, its completed siblings stay in traj_payload/."""
    records, run = _simulated_run(tmp_path)
    payload, errors = run / "traj_payload", run / "traj_err"
    samples = sorted(payload.glob("*/*/samples/*.json"))
    assert len(samples) + len(list(errors.glob("*/*/error.json"))) <= len(records)
    for path in samples:
        sample = json.loads(path.read_text())
        session, instance = path.parent.parent.name, path.parent.parent.parent.name
        assert "group_index" not in sample and "index" not in sample
        assert sample["reward"] is None and sample["status"] == "completed"
        assert (sample["session_id"], sample["trajectory_id"]) == (session, session)
        assert (sample["instance_id"], sample["segment_index"]) == (instance, int(path.stem))
        metadata = sample["metadata"]
        assert not {"parent_traj_id", "dressage_async_group_id", "segment_index"} & set(metadata)
        assert "dressage_return_async_group_id" not in metadata
        assert metadata["session_id"] == session and metadata["instance_id"] == instance
        assert isinstance(metadata["dressage_start_rollout_id"], int)
        assert "dressage_retry_count" not in metadata  # absent means 0, as Dressage writes
        assert isinstance(metadata["proxy_extra_info"]["timestamp"], str)
    sessions = sorted(payload.glob("*/*/session.json"))
    for path in sessions:
        data = json.loads(path.read_text())["data"]
        assert [entry["segment_index"] for entry in data] == list(range(len(data)))
        assert len(data) == len(list((path.parent / "samples").glob("*.json")))
        for entry in data:
            assert entry["trajectory_id"] == path.parent.name
            assert entry["segment_count"] == len(data)
            assert len(entry["full_versions"]) == len(entry["full_loss_mask"])
            assert isinstance(entry["extra_info"]["timestamp"], str)
    # Prompts recur: instance folders hold several attempts (start rollouts).
    starts: dict[str, set[int]] = {}
    for path in samples:
        metadata = json.loads(path.read_text())["metadata"]
        starts.setdefault(metadata["instance_id"], set()).add(metadata["dressage_start_rollout_id"])
    assert len(starts) >= 4 and all(len(s) > 1 for s in starts.values())
    # One error.json per aborted trajectory, in Dressage's error shape.
    aborted = {r["metadata"]["session_id"]: r for r in records if r["status"] == "aborted"}
    found = sorted(errors.glob("*/*/error.json"))
    assert len(found) == len(aborted) > 0
    for path in found:
        error = json.loads(path.read_text())
        record = aborted[path.parent.name]
        assert error["success"] is False and isinstance(error["timestamp"], float)
        assert error["session_id"] == path.parent.name
        assert error["instance_id"] == path.parent.parent.name
        assert error["http"] is None and "backend timeout" in error["error"]["message"]
        sample = error["sample"]
        assert (sample["group_index"], sample["index"]) == (record["group_index"], record["index"])
        assert sample["metadata"]["dressage_async_group_id"] == record["group_index"]
        assert (
            sample["metadata"]["dressage_start_rollout_id"]
            == (record["metadata"]["dressage_start_rollout_id"])
        )
        siblings = {r["metadata"]["session_id"] for r in records
                    if r["group_index"] == record["group_index"] and r["status"] != "aborted"}  # fmt: skip
        assert siblings and all(
            (payload / error["instance_id"] / s / "session.json").is_file() for s in siblings
        )


def test_a_simulated_run_folder_is_read_by_attempt_and_replayed_as_a_run(tmp_path: Path) -> None:
    records, run = _simulated_run(tmp_path)
    table = analysis.load_logs([run])
    groups = {r["group_index"] for r in records}
    assert table["group_id"].n_unique() == len(groups)
    assert all(re.fullmatch(r"dapo_math_\d{5}/s\d+/r0", g) for g in table["group_id"].unique())
    # The run loop finds its calls in the log written beside the trees.
    assert analysis.is_run_folder(run)
    replayed = analysis.replay_run(analysis.read_run(run), keep_versions=0)
    assert replayed.to_dict()["groups"]["total"] == len(groups)
    failed = {r["group_index"] for r in records if r["status"] == "aborted"}
    assert replayed.to_dict()["groups"]["failed"] == len(failed)
