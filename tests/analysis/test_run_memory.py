"""A run folder's rollouts.jsonl is read for its ids only (issue 18): its samples were
held whole until the file was read, token lists and all."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

from analysis.formats.dressage.step_dumps import read_dump_rows


def rollouts(folder: Path, samples: int) -> Path:
    """A run folder whose rollouts.jsonl has ``samples`` lines of 2.3 MB."""
    folder.mkdir()
    with (folder / "rollouts.jsonl").open("w") as out:
        for i in range(samples):
            sample = {
                "index": i, "group_index": i // 2, "tokens": list(range(150_000)),
                "loss_mask": [1] * 150_000,
                "metadata": {
                    "parent_traj_id": f"t{i}", "instance_id": f"q{i // 2}",
                    "dressage_return_rollout_id": 3, "dressage_return_async_group_id": i // 2,
                    "full_versions": ["-1"] * 1000 + ["5"] * 149_000,
                },
            }  # fmt: skip
            out.write(json.dumps(sample) + "\n")
    return folder


def peak_of_reading(folder: Path) -> int:
    tracemalloc.start()
    try:
        rows, source = read_dump_rows(folder)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert source == "rollouts.jsonl"
    assert [(r["trajectory_id"], r["group_position"], r["sample_index"]) for r in rows] == [
        (f"t{i}", i // 2, i) for i in range(len(rows))
    ]
    return peak


def test_rollouts_jsonl_samples_are_held_as_their_ids(tmp_path: Path) -> None:
    few = peak_of_reading(rollouts(tmp_path / "few", 3))
    many = peak_of_reading(rollouts(tmp_path / "many", 12))
    # One line at a time, its lists as lengths: held whole, the peak grew with each line.
    assert many < 1.3 * few, (many, few)
