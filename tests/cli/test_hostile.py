"""Inputs built to exhaust memory or time, run as the command line runs them (issue 18).

Each ends with an exit code of the README's table and a one-line error naming the limit
and the option that raises it, in under 10 s (plus the interpreter's start), with a peak
resident memory under 1 GB measured by ``os.wait4`` (see :mod:`tests.hostile`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import hostile

PEAK_MB = 1024
SECONDS = 10 + 5  # the bound, and the start of an interpreter that imports polars


def _refused(run: hostile.Run, code: int, *words: str) -> None:
    assert run.code == code, run.stderr
    assert run.stderr.startswith("Error: ") and run.stderr.count("\n") == 1, run.stderr
    for word in words:
        assert word in run.stderr, run.stderr
    assert run.peak_mb < PEAK_MB, run.peak_mb
    assert run.seconds < SECONDS, run.seconds


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "option"),
    [
        (lambda: hostile.laughs(40), "--limit max_pickle_values="),
        (lambda: hostile.memo_reuse(1 << 20, 200_000), "--limit max_pickle_values="),
        (lambda: hostile.dump_of(hostile.laughs(40)), "--limit max_pickle_values="),
        (lambda: hostile.deep_lists(200_000), "--limit max_depth="),
        (lambda: hostile.huge_memo(2_000_000_000), "memo index"),
        (hostile.self_containing, "contains itself"),
        (lambda: hostile.deflated_pt(256 << 20), "--limit max_inflation="),
    ],
    ids=["laughs", "memo-reuse", "laughs-in-samples", "deep", "huge-memo", "cycle", "zip-bomb"],
)
def test_pickle_bombs(tmp_path: Path, make: object, option: str) -> None:
    path = tmp_path / "0.pt"
    path.write_bytes(make())  # type: ignore[operator]
    _refused(hostile.run_bounded("inspect", str(path)), 5, option)


def test_a_pickle_bomb_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "0.pt"
    path.write_bytes(hostile.dump_of(hostile.memo_reuse(1 << 20, 100_000)))
    _refused(hostile.run_bounded("inspect", str(path)), 5, "--limit max_pickle_values=")
    skipped = hostile.run_bounded("inspect", str(path), "--on-bad-record", "skip")
    assert skipped.code == 0, skipped.stderr  # skipped as a damaged file, and said so
    assert "damaged file" in skipped.stderr


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
@pytest.mark.parametrize("name", ["x.pt", "x.jsonl", "x.jsonl.gz", "x.json"])
def test_a_link_to_an_endless_device_is_refused(tmp_path: Path, name: str) -> None:
    link = tmp_path / name
    link.symlink_to("/dev/zero")
    _refused(hostile.run_bounded("inspect", str(link)), 3, "not a regular file")
