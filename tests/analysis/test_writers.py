"""Log writers: complete files or none, folders never mixed, gzip headers clean."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis.errors import OutputError
from analysis.io.raw_writers import log_format_for, write_jsonl, write_pt_dumps


def failing_records(after: int) -> Iterator[dict]:
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

    def records() -> Iterator[dict]:
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
