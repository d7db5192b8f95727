"""One large JSONL file read on two cores (issue 17, target 2): the table, the skipped
records and the first error are those of one process reading it from start to end."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest

import analysis
from analysis.formats.text import jsonl_parts
from analysis.formats.text.jsonl_parts import cut
from analysis.output.raw_logs import write_jsonl
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.simulator import simulate

CONFIG = SimulationConfig(
    n_groups=60, n_samples_per_prompt=4, median_response_tokens=40, max_response_tokens=400,
    log_prob_drift=0.05, seed=11,
)  # fmt: skip


def log_with_bad_lines(path: Path, bad: bool) -> Path:
    """A simulated log; with ``bad``, a few bad records early, midway and late."""
    write_jsonl(simulate(CONFIG), path)
    if bad:
        lines = path.read_bytes().splitlines(keepends=True)
        for at in (3, len(lines) // 2, len(lines) - 5):
            lines[at] = b'{"group_index": 1, "tokens": \n'  # not valid JSON
        lines.insert(len(lines) // 3, b"\n")  # a blank line: line numbers go on
        lines[-2] = b"[1, 2]\n"  # valid JSON, not a record
        path.write_bytes(b"".join(lines))
    return path


def loaded(
    path: Path, monkeypatch: pytest.MonkeyPatch, *, split: bool, **settings: Any
) -> tuple[Any, ...]:
    monkeypatch.setattr(jsonl_parts, "SPLIT_MIN_BYTES", 0 if split else 1 << 62)
    report = analysis.LoadReport()
    try:
        table = analysis.load_logs([path], report=report, **settings)
    except analysis.ReplayError as error:
        return type(error), str(error)
    return table, dict(report.skipped), list(report.skipped_where)


def pieces_the_helper_sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The indexes of the pieces the helper sends back, filled as a load collects them."""
    taken: list[int] = []
    real = jsonl_parts.Helper.collected

    def collected(self: jsonl_parts.Helper, *waiting: Any) -> dict:  # type: ignore[type-arg]
        sent = real(self, *waiting)
        taken.extend(sent)
        return sent

    monkeypatch.setattr(jsonl_parts.Helper, "collected", collected)
    return taken


@pytest.mark.parametrize("bad", [False, True])
@pytest.mark.parametrize("policy", ["skip", "fail"])
def test_two_processes_read_what_one_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: bool, policy: str
) -> None:
    path = log_with_bad_lines(tmp_path / "log.jsonl", bad)
    one = loaded(path, monkeypatch, split=False, on_bad_record=policy)
    two = loaded(path, monkeypatch, split=True, on_bad_record=policy)
    if isinstance(one[0], type):  # an error: the same one
        assert bad and policy == "fail"
        assert two == one
        return
    assert two[0].equals(one[0])
    assert two[1:] == one[1:]
    assert one[0].height > 200
    if bad:
        assert sum(one[1].values()) == 4 and len(one[2]) == 4


def test_the_helper_reads_its_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail only if the helper does read pieces: it does."""
    path = log_with_bad_lines(tmp_path / "log.jsonl", False)
    taken = pieces_the_helper_sent(monkeypatch)
    monkeypatch.setattr(jsonl_parts, "PIECES", 400)  # enough that it gets some
    loaded(path, monkeypatch, split=True)
    assert taken and max(taken) == len(cut(path, path.stat().st_size, 400)) - 1


def test_a_helper_that_dies_leaves_its_pieces_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = log_with_bad_lines(tmp_path / "log.jsonl", True)
    one = loaded(path, monkeypatch, split=False, on_bad_record="skip")
    # It dies once it has been given a piece (all of them go to this process otherwise).
    dies = (
        "import sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from analysis.formats.text.jsonl_parts import _read_frame\n"
        "_read_frame(sys.stdin.buffer), _read_frame(sys.stdin.buffer)  # the job, a piece\n"
        "print('oops', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    monkeypatch.setattr(jsonl_parts, "_BOOTSTRAP", dies)
    monkeypatch.setattr(jsonl_parts, "PIECES", 400)
    monkeypatch.setattr(jsonl_parts, "SPLIT_MIN_BYTES", 0)
    report = analysis.LoadReport()
    table = analysis.load_logs([path], report=report, on_bad_record="skip")
    assert table.equals(one[0]) and dict(report.skipped) == one[1]
    assert list(report.skipped_where) == one[2]
    (warning,) = report.warnings
    assert "the helper process failed (exit status 3: oops)" in warning


def test_no_helper_when_turned_off_or_compressed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonl_parts, "SPLIT_MIN_BYTES", 0)
    path = log_with_bad_lines(tmp_path / "log.jsonl", False)
    assert jsonl_parts.split_wanted(path, path.stat().st_size)
    monkeypatch.setenv("DRESSAGE_REPLAY_HELPERS", "0")
    assert not jsonl_parts.split_wanted(path, path.stat().st_size)
    monkeypatch.delenv("DRESSAGE_REPLAY_HELPERS")
    gz = tmp_path / "log.jsonl.gz"
    write_jsonl(simulate(CONFIG), gz)
    assert not jsonl_parts.split_wanted(gz, gz.stat().st_size)


@pytest.mark.parametrize("count", [1, 2, 7, 50, 10_000])
def test_pieces_cover_the_file_at_line_starts(tmp_path: Path, count: int) -> None:
    path = tmp_path / "lines.jsonl"
    lines = [b"x" * (n * 37 % 300) + b"\n" for n in range(400)] + [b"last, no newline"]
    data = b"".join(lines)
    path.write_bytes(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonl_parts, "_BLOCK", 1000)  # several blocks: cuts fall across them
        pieces = cut(path, len(data), count)
    assert pieces[0].start == 0 and pieces[-1].stop == len(data)
    assert len(pieces) <= count
    starts = {0}
    total = 0
    for line in lines:
        total += len(line)
        starts.add(total)
    for before, after in itertools.pairwise(pieces):
        assert before.stop == after.start
    for piece in pieces:
        assert piece.start in starts
        assert piece.first_line == data[: piece.start].count(b"\n") + 1


@pytest.mark.parametrize("policy", ["skip", "fail"])
def test_the_helpers_pieces_are_numbered_as_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """The helper numbers its pieces' lines from 1 (the file is cut without counting its
    lines): its rows get the file's line numbers, and a piece where it met a bad record
    is read again here, so the skipped records and the first error name the file's lines."""
    path = log_with_bad_lines(tmp_path / "log.jsonl", policy == "skip")
    if policy == "fail":  # one bad line, the last: in the first piece the helper takes
        lines = path.read_bytes().splitlines(keepends=True)
        lines[-1] = b'{"group_index": 1, "tokens": \n'
        path.write_bytes(b"".join(lines))
    one = loaded(path, monkeypatch, split=False, on_bad_record=policy)
    taken = pieces_the_helper_sent(monkeypatch)
    monkeypatch.setattr(jsonl_parts, "PIECES", 400)
    front = jsonl_parts.PieceQueue.take_front

    def after_the_helper(self: jsonl_parts.PieceQueue) -> int | None:
        """This process waits (up to 120 s: a busy host may be slow to start the helper)
        for the helper to take its first piece."""
        deadline = time.monotonic() + 120
        while self.front == 0 and self.back == self.count - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        return front(self)

    monkeypatch.setattr(jsonl_parts.PieceQueue, "take_front", after_the_helper)
    two = loaded(path, monkeypatch, split=True, on_bad_record=policy)
    # The helper took the last pieces, among them the one with the last bad line.
    assert len(cut(path, path.stat().st_size, 400)) - 1 in taken
    if policy == "fail":
        assert isinstance(one[0], type) and f":{len(lines)}:" in one[1]
        assert two == one
        return
    assert two[0].equals(one[0]) and two[1:] == one[1:]
    assert two[0]["record"].to_list() == sorted(two[0]["record"].to_list())


@pytest.mark.parametrize("count", [2, 7, 50])
def test_pieces_cut_without_counting_are_the_same_pieces(tmp_path: Path, count: int) -> None:
    path = tmp_path / "lines.jsonl"
    lines = [b"x" * (n * 37 % 300) + b"\n" for n in range(400)]
    lines[100] = b"y" * 300_000 + b"\n"  # longer than a piece, and than a read block
    data = b"".join([*lines, b"last, no newline"])
    path.write_bytes(data)
    numbered = cut(path, len(data), count)
    unnumbered = cut(path, len(data), count, number=False)
    assert [(p.index, p.start, p.stop) for p in unnumbered] == [
        (p.index, p.start, p.stop) for p in numbered
    ]
    assert {p.first_line for p in unnumbered} == {0}


def test_a_read_error_midway_ends_the_file_as_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that fails within a piece read here: the file ends there, as when one
    process reads it (the pieces after it were read on, numbered as if the broken piece
    held no lines: a piece's line count is its reader's)."""
    import errno
    import io

    from analysis.formats.text import jsonl

    path = log_with_bad_lines(tmp_path / "log.jsonl", False)
    broken = path.stat().st_size // 10  # within the first pieces, which this process reads

    class Failing(io.BufferedReader):
        def readline(self, size: int | None = -1) -> bytes:
            if broken <= self.tell() < broken + 4096:  # one bad block: the rest reads
                raise OSError(errno.EIO, "Input/output error")
            return super().readline(size)

    monkeypatch.setattr(jsonl, "_open", lambda name: Failing(io.FileIO(name), 1 << 22))
    one = loaded(path, monkeypatch, split=False, on_bad_record="skip")
    two = loaded(path, monkeypatch, split=True, on_bad_record="skip")
    assert 0 < one[0].height < 200 and one[1] == {"damaged file": 1}
    assert two[0].equals(one[0]), (two[0]["record"].to_list()[-5:], one[0]["record"].max())
    assert two[1:] == one[1:]


def test_progress_counts_the_bytes_of_both_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file read in pieces moves its bar as either process reads (issue 33: a 1.28 GB log
    sat at 0% for a minute, then 100%)."""
    path = log_with_bad_lines(tmp_path / "log.jsonl", False)
    monkeypatch.setattr(jsonl_parts, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(jsonl_parts, "PIECES", 40)
    calls: list[tuple[int, int]] = []
    helped = pieces_the_helper_sent(monkeypatch)
    options = analysis.ReadOptions(progress=lambda done, total: calls.append((done, total)))
    analysis.load_logs([path], options)
    total = calls[-1][1]
    assert calls[-1][0] == total and {t for _, t in calls} == {total}
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)  # never back
    between = {done for done, _ in calls if 0 < done < total}
    assert len(between) >= 10, calls
    # the helper's pieces count as it sends them: the bar passes what this process read
    assert helped and max(between) > total * 0.75, (helped, calls)
