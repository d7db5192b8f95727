"""A folder of slime dumps is ordered by each dump's ``rollout_id``, read from its first
bytes, and each dump is read whole only when its turn comes (issue 17: the reader no
longer holds a whole folder's samples to order them)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

import analysis
import analysis.formats.slime_dumps.format as dump_format
import analysis.formats.slime_dumps.reader as dumps
from analysis.formats.pickled.pickles import dump_pt
from analysis.formats.slime_dumps.reader import _UNKNOWN, _peek_rollout_id, dump_rollout_id


def sample(group: int, step: int) -> dict[str, Any]:
    return {
        "group_index": group,
        "index": group,
        "tokens": [1, 2, 3, 4],
        "response_length": 2,
        "loss_mask": [1, 1],
        "metadata": {"full_versions": ["-1", "-1", str(step), str(step)]},
    }


def write_dumps(folder: Path, steps: list[int], *, samples_first: frozenset[int]) -> None:
    """``rollout_<step>.pt`` per step, written in the order given; the steps in
    ``samples_first`` put ``samples`` before ``rollout_id`` in the dict."""
    folder.mkdir()
    for step in steps:
        samples = [sample(step * 10 + i, step) for i in range(3)]
        dump = (
            {"samples": samples, "rollout_id": step}
            if step in samples_first
            else {"rollout_id": step, "samples": samples}
        )
        dump_pt(dump, folder / f"rollout_{step}.pt")


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"rollout_id": 7, "samples": []}, 7),
        ({"rollout_id": 70_000, "samples": [1]}, 70_000),
        ({"rollout_id": 2**40, "samples": [1]}, 2**40),
        ({"rollout_id": None, "samples": [1]}, None),
        ([{"a": 1}], None),
        ({"samples": [], "rollout_id": 3}, _UNKNOWN),  # another key first: read it all
        ({"rollout_id": True, "samples": []}, _UNKNOWN),  # refused by the whole read
        ({"rollout_id": "3", "samples": []}, _UNKNOWN),
        ({"id": 3}, _UNKNOWN),
    ],
)
def test_the_rollout_id_from_the_first_bytes(tmp_path: Path, obj: Any, expected: Any) -> None:
    archive, bare = tmp_path / "a.pt", tmp_path / "b.pkl"
    dump_pt(obj, archive)
    bare.write_bytes(pickle.dumps(obj, protocol=2))
    assert _peek_rollout_id(archive) is expected or _peek_rollout_id(archive) == expected
    assert _peek_rollout_id(bare) is expected or _peek_rollout_id(bare) == expected


def test_a_damaged_or_empty_file_is_left_to_the_whole_read(tmp_path: Path) -> None:
    for name, data in [("empty.pt", b""), ("cut.pt", b"PK\x03\x04\x00"), ("junk.pkl", b"\x80")]:
        (tmp_path / name).write_bytes(data)
        assert _peek_rollout_id(tmp_path / name) is _UNKNOWN
    with pytest.raises(analysis.LogFormatError):
        dump_rollout_id(tmp_path / "cut.pt", trust_pickle=False)


def test_a_folder_is_read_in_rollout_order_one_dump_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = [12, 3, 0, 10, 2, 1]  # names order: 0, 1, 10, 12, 2, 3
    write_dumps(tmp_path / "dumps", steps, samples_first=frozenset({10}))
    read: list[int] = []
    real = dumps.dump_samples

    def spy(path: Path, *, trust_pickle: bool, **limits: Any) -> tuple[int | None, list[Any]]:
        found = real(path, trust_pickle=trust_pickle, **limits)
        read.append(found[0])  # type: ignore[arg-type]
        return found

    monkeypatch.setattr(dump_format, "dump_samples", spy)
    monkeypatch.setattr(dumps, "dump_samples", spy)
    table = analysis.load_logs([tmp_path / "dumps"])
    assert table["trainer_step"].unique(maintain_order=True).to_list() == sorted(steps)
    # Each dump read whole once, in rollout order; the one whose rollout_id is not its
    # first key is read once more (and let go) to order it.
    assert read == [10, *sorted(steps)]


def test_a_dump_giving_its_rollout_id_twice_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "dumps"
    folder.mkdir()
    key = b"X\n\x00\x00\x00rollout_id"
    # {rollout_id: 1, samples: [], rollout_id: 2} as pickle opcodes: the key is repeated.
    data = b"\x80\x02}(" + key + b"K\x01X\x07\x00\x00\x00samples]" + key + b"K\x02u."
    (folder / "rollout_1.pkl").write_bytes(data)
    assert pickle.loads(data) == {"rollout_id": 2, "samples": []}
    with pytest.raises(analysis.LogFormatError, match="rollout_id twice"):
        analysis.load_logs([folder / "rollout_1.pkl"])
