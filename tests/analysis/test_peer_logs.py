"""Other systems' logs read into the canonical table (docs/semantics.md, "Other systems'
logs"): each reader on a fixture in its system's shape, value by value; which format a
file or folder is found to be; the one-line errors of bad records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import analysis
from analysis.errors import ConfigError, LogFormatError, MissingFieldError, ReplayError, SkipReason
from analysis.formats.discover import detect_sources
from analysis.formats.peers import PeerFormat
from analysis.formats.registry import BY_NAME
from tests.fixtures import peer_logs

Writer = Any


def _spans(value: Any) -> list[tuple[int, int, str]] | None:
    if value is None:
        return None
    return [(span["start"], span["end"], span["version"]) for span in value]


def _read(folder: Path, **settings: Any) -> tuple[list[dict[str, Any]], analysis.LoadReport]:
    report = analysis.LoadReport()
    table = analysis.load_logs([folder], report=report, **settings)
    rows = table.to_dicts()
    for row in rows:
        row["version_spans"] = _spans(row["version_spans"])
    return rows, report


def _check(rows: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert len(rows) == len(expected)
    for number, (row, want) in enumerate(zip(rows, expected, strict=True)):
        for name, value in want.items():
            if isinstance(value, float):
                assert row[name] == pytest.approx(value), (number, name)
            else:
                assert row[name] == value, (number, name, row[name])


def test_prime_rl_episodes_map_field_by_field(tmp_path: Path) -> None:
    expected = peer_logs.write_prime_rl(tmp_path)
    rows, report = _read(tmp_path / "rollouts")
    _check(rows, expected)
    assert report.formats == ["prime-rl"]
    # train/all only, in step order; the effective and eval subsets are named as not read
    assert {Path(row["source"]).parts[-4:-1] for row in rows} == {
        ("step_1", "train", "all"), ("step_2", "train", "all"),
    }  # fmt: skip
    assert any("effective and eval subsets are not read" in w for w in report.warnings)
    assert all(row["end_version_derived"] is False for row in rows)


def test_prime_rl_run_folder_and_a_single_effective_file(tmp_path: Path) -> None:
    peer_logs.write_prime_rl(tmp_path)
    rows, _ = _read(tmp_path)  # the run's output folder, holding rollouts/
    assert len(rows) == 5
    effective = tmp_path / "rollouts/step_1/train/effective/traces.jsonl"
    rows, report = _read(effective)
    assert [row["trajectory_id"] for row in rows] == ["e1", "e2"]
    assert {row["trainer_step"] for row in rows} == {1}
    assert report.formats == ["prime-rl"]


def test_areal_dumps_map_field_by_field(tmp_path: Path) -> None:
    expected = peer_logs.write_areal(tmp_path)
    rows, report = _read(tmp_path / "rollout")
    _check(rows, expected)  # tail folder 10 after 2: numbers compared as numbers
    assert report.formats == ["areal"]
    assert all(row["trainer_step"] is None for row in rows)
    assert [row["sample_index"] for row in rows] == [0, 1, 0, 1, 0]


def test_verl_dumps_map_field_by_field(tmp_path: Path) -> None:
    expected = peer_logs.write_verl(tmp_path)
    rows, report = _read(tmp_path / "verl")
    _check(rows, expected)  # step 10 read after step 2
    assert report.formats == ["verl"]
    assert all(row["end_version"] is None and row["version_spans"] is None for row in rows)
    assert all(row["response_length"] is None for row in rows)


def test_nemo_rl_dumps_map_field_by_field(tmp_path: Path) -> None:
    expected = peer_logs.write_nemo_rl(tmp_path)
    rows, report = _read(tmp_path / "nemo")
    _check(rows, expected)
    assert report.formats == ["nemo-rl"]
    assert [row["log_prob_tokens"] for row in rows] == [3, 1, 2, 4, 2]


@pytest.mark.parametrize(
    ("writer", "folder", "name"),
    [
        (peer_logs.write_prime_rl, "rollouts/step_2/train/all/traces.jsonl", "prime-rl"),
        (peer_logs.write_areal, "rollout/2/9.jsonl", "areal"),
        (peer_logs.write_verl, "verl/10.jsonl", "verl"),
        (peer_logs.write_nemo_rl, "nemo/train_data_step1.jsonl", "nemo-rl"),
    ],
)
def test_a_file_is_found_by_its_first_record(
    writer: Writer, folder: str, name: str, tmp_path: Path
) -> None:
    writer(tmp_path)
    path = tmp_path / folder
    renamed = tmp_path / "copied.log"  # no telling name: the first record decides
    renamed.write_bytes(path.read_bytes())
    for candidate in (path, renamed):
        sources, _ = detect_sources([candidate])
        assert [source.format for source in sources] == [name]


def test_our_own_jsonl_stays_jsonl(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"group_index": 0, "metadata": {"parent_traj_id": "t"}}) + "\n")
    assert [s.format for s in detect_sources([log])[0]] == ["jsonl"]


def test_log_format_overrides_what_is_found(tmp_path: Path) -> None:
    peer_logs.write_verl(tmp_path)
    path = tmp_path / "verl/2.jsonl"
    assert [s.format for s in detect_sources([path], log_format="jsonl")[0]] == ["jsonl"]
    # read as our JSONL, a verl record has no group id: the look-up says what it lacks
    with pytest.raises(MissingFieldError):
        analysis.load_logs([path], log_format="jsonl")
    with pytest.raises(ConfigError, match="expected one of"):
        detect_sources([path], log_format="slime-ish")


def test_a_folder_without_the_areal_name_is_read_as_areal_when_told(tmp_path: Path) -> None:
    peer_logs.write_areal(tmp_path)
    moved = tmp_path / "dumps"
    (tmp_path / "rollout").rename(moved)
    rows, report = _read(moved, log_format="areal")
    assert report.formats == ["areal"] and len(rows) == 5


# --------------------------------------------------------------------------- bad records

BAD = [
    ("prime-rl", {"id": "e", "task": {}, "traces": [], "ok": "yes", "group": {"id": "g"}},
     LogFormatError, "ok must be true or false (found 'yes')"),
    ("prime-rl", {"id": "e", "task": {}, "traces": [], "ok": True},
     MissingFieldError, "the prime-rl episode e has no group.id"),
    ("prime-rl", {"id": "e", "task": {}, "traces": [], "ok": True, "group": {"id": "g"},
                  "run": {"work": {"policy": {"start": 3, "end": 1}}}},
     LogFormatError, "run.work.policy must hold whole numbers start <= end"),
    ("areal", {"task_id": 1, "sample_idx": 0, "head_version": 2, "tail_version": 1},
     LogFormatError, "head_version 2 and tail_version 1 must satisfy"),
    ("areal", {"task_id": "one", "sample_idx": 0, "head_version": -1, "tail_version": 1},
     LogFormatError, "task_id must be a whole number (found 'one')"),
    ("areal", {"task_id": 1, "sample_idx": 0, "head_version": -1, "tail_version": 1,
               "seqlen": 4, "prompt_len": 9},
     LogFormatError, "prompt_len 9 is longer than seqlen 4"),
    ("verl", {"input": "q", "output": "a", "score": 1.0, "step": 1.5},
     LogFormatError, "step must be a whole number (found 1.5)"),
    ("verl", {"input": ["q"], "output": "a", "score": 1.0, "step": 1},
     LogFormatError, "input must be text"),
    ("nemo-rl", {"content": [], "rewards": [1.0], "token_ids": [[1, 2]], "idx": 0,
                 "token_loss_mask": [[0, 1, 1]]},
     LogFormatError, "token_loss_mask has 3 values but token_ids 2"),
    ("nemo-rl", {"content": [], "rewards": [1.0], "token_ids": [[1, 2]], "idx": 0,
                 "token_loss_mask": [[0, 1]], "generation_logprobs": [[0.0, "x"]],
                 "prev_logprobs": [[0.0, 0.1]]},
     LogFormatError, "log-probs must be numbers"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "record", "error", "text"), BAD)
def test_a_bad_record_is_one_line_naming_file_and_line(
    name: str, record: dict[str, Any], error: type[Exception], text: str, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("\n" + json.dumps(record) + "\n")
    with pytest.raises(error) as raised:
        analysis.load_logs([log], log_format=name)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{log}:2: ")
    assert text in message
    if error is LogFormatError:
        assert message.endswith("fix the record or pass on_bad_record=skip")


def good_record(name: str) -> dict[str, Any]:
    """One well-formed line of each system's log."""
    return {
        "prime-rl": peer_logs.prime_episode("e", "g", 0, 0, step=1),
        "areal": peer_logs.areal_sample(1, 0, -1, 1, 1.0),
        "verl": peer_logs.verl_sample(1, "q", 1.0),
        "nemo-rl": peer_logs.nemo_sample(0, [1], [2], 1.0),
    }[name]


@pytest.mark.parametrize("name", ["prime-rl", "areal", "verl", "nemo-rl"])
def test_bad_records_are_skipped_and_counted_when_asked(name: str, tmp_path: Path) -> None:
    good = good_record(name)
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(good) + "\n[1, 2]\n{not json\n" + json.dumps(good) + "\n")
    report = analysis.LoadReport()
    table = analysis.load_logs([log], report=report, on_bad_record="skip", log_format=name)
    assert table.height == 2
    assert report.skipped[SkipReason.BAD_RECORD] == 2
    assert any(
        ":2: " in where and "must be a JSON object" in where for where in report.skipped_where
    )


def test_the_readme_tarball_is_what_the_generator_writes(tmp_path: Path) -> None:
    """tests/fixtures/peer-logs.tar.xz (the README's example) holds exactly the files
    tests/fixtures/peer_logs.py writes, byte for byte."""
    import tarfile

    archive = Path(peer_logs.__file__).with_name("peer-logs.tar.xz")
    with tarfile.open(archive) as tar:
        stored = {
            member.name: tar.extractfile(member).read()  # type: ignore[union-attr]
            for member in tar.getmembers()
            if member.isfile()
        }
    peer_logs.write_all(tmp_path / "peer-logs")
    written = {
        str(path.relative_to(tmp_path)): path.read_bytes()
        for path in (tmp_path / "peer-logs").rglob("*")
        if path.is_file()
    }
    assert stored == written


def test_one_step_folder_of_prime_rl(tmp_path: Path) -> None:
    peer_logs.write_prime_rl(tmp_path)
    rows, report = _read(tmp_path / "rollouts/step_2")
    assert [row["trajectory_id"] for row in rows] == ["e4", "e5"]
    assert any("one step of prime-rl rollouts" in warning for warning in report.warnings)


ODD_VALUES: tuple[Any, ...] = (
    None, 0, 3, -1, 2.5, float("nan"), True, "", "x", [], [1, "a"], {}, {"a": None}, 2**70,
)  # fmt: skip
"""What a damaged record may hold anywhere in place of a proper value."""


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value, as the keys and indexes that lead to it."""
    found = [path] if path else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*path, index))
    return found


def _with(record: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(record))
    node = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out


GOOD = {
    "prime-rl": peer_logs.prime_episode("e", "g", 0, 1, step=1),
    "areal": peer_logs.areal_sample(1, 0, -1, 1, 1.0),
    "verl": peer_logs.verl_sample(1, "q", 1.0),
    "nemo-rl": peer_logs.nemo_sample(0, [1], [2, 3], 1.0),
}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_any_odd_value_anywhere_is_a_bad_record_never_a_crash(name: str) -> None:
    """Every place of a good record, in turn, holds each odd value: the reader gives a row
    or a one-line error naming the file and line, never another exception."""
    good = GOOD[name]
    records = [_with(good, path, value) for path in _paths(good) for value in ODD_VALUES]
    records += [value for value in ODD_VALUES if not isinstance(value, dict)]
    peer = BY_NAME[name]
    assert isinstance(peer, PeerFormat) and peer.rows is not None
    items = list(peer.rows(Path("log.jsonl"), enumerate(records, start=1)))
    assert len(items) == len(records)
    errors = 0
    for number, record, row in items:
        assert record is records[number - 1]
        if isinstance(row, ReplayError):
            errors += 1
            assert str(row).startswith(f"log.jsonl:{number}: ") and "\n" not in str(row)
        else:
            assert isinstance(row["group_id"], str)
    assert errors >= len(ODD_VALUES) - 2  # at least the records that are not objects


def test_files_beside_a_peer_log_are_named_and_not_read(tmp_path: Path) -> None:
    """NeMo-RL writes val_data_step{N}.jsonl (content and rewards only) beside its train
    dumps; a folder of both is the train dumps, and the warning names the others."""
    peer_logs.write_nemo_rl(tmp_path)
    folder = tmp_path / "nemo"
    (folder / "val_data_step0.jsonl").write_text(
        json.dumps({"content": [[]], "rewards": [1.0], "idx": 0}) + "\n"
    )
    (folder / "a-notes.jsonl").write_text(json.dumps({"note": 1}) + "\n")
    rows, report = _read(folder)
    assert len(rows) == 5 and report.formats == ["nemo-rl"]
    assert any(
        "read the 2 JSONL files only" in w
        and "2 other JSONL files (a-notes.jsonl, val_data_step0.jsonl)" in w
        for w in report.warnings
    ), report.warnings


def test_a_folder_that_cannot_be_listed_is_not_taken_for_a_peer_log(tmp_path: Path) -> None:
    """peer_tree looks into the folder given; an error there is the folder reader's to
    report (exit 3), not an internal error (found by the slow reliability test)."""
    from analysis.formats.discover import peer_tree

    class Locked(type(tmp_path)):  # type: ignore[misc]
        def glob(self, pattern: str) -> Any:
            raise PermissionError(13, "Permission denied", str(self))

        def __truediv__(self, other: Any) -> Any:
            return Locked(str(self), other)

        def is_file(self) -> bool:
            raise PermissionError(13, "Permission denied", str(self))

    assert peer_tree(Locked(str(tmp_path / "step_1"))) is None


@pytest.mark.parametrize("name", ["prime-rl", "areal", "verl", "nemo-rl"])
def test_a_peer_log_is_read_within_the_limits_given_with_progress(
    name: str, tmp_path: Path
) -> None:
    """Another system's log was read at the default limits whatever was asked, and
    without progress."""
    good = good_record(name)
    line = json.dumps(good) + "\n"
    log = tmp_path / "log.jsonl"
    log.write_text(line * 3)
    with pytest.raises(LogFormatError, match=r":1: .*max_record_bytes="):
        analysis.load_logs([log], log_format=name, max_record_bytes=len(line) - 2)
    seen: list[tuple[int, int]] = []
    table = analysis.load_logs([log], log_format=name, progress=lambda d, t: seen.append((d, t)))
    # Per mille of the file's bytes, as a JSONL log's (the sources alone count 0/1, 1/1).
    assert table.height == 3 and (1000, 1000) in seen


def test_a_first_line_past_the_limit_is_not_taken_for_the_wrong_format(tmp_path: Path) -> None:
    """An unread line tells nothing of the format: no 'probably not a verl log'."""
    log = tmp_path / "log.jsonl"  # past the default limit, so that no probe reads it
    log.write_text(json.dumps(peer_logs.verl_sample(1, "q" * (33 << 20), 1.0)) + "\n")
    with pytest.raises(LogFormatError) as raised:
        analysis.load_logs([log], log_format="verl")
    assert "max_record_bytes=" in str(raised.value) and "probably not" not in str(raised.value)
