"""Token lists with a span per token (alternating versions; issue 18), run as the command
line runs them: a record of more spans than ``max_spans`` is refused before its spans are
built, and below the limit such lists are read in bulk, in bounded CPU time and memory
(as :mod:`tests.cli.test_hostile` measures them)."""

from __future__ import annotations

from pathlib import Path

import pytest

import analysis
import analysis.errors
from analysis.formats.text import lean
from tests import hostile
from tests.cli.test_hostile import CPU_SECONDS, PEAK_MB

GOOD = b'{"group_index": 0, "rollout_id": 1, "metadata": {"parent_traj_id": "t", "full_versions": ["3"]}}\n'


def alternating(group: int, pairs: int, pair: bytes = b"0,1") -> bytes:
    """A record whose token versions alternate, one run per token."""
    return (
        b'{"group_index": %d, "rollout_id": 1, "metadata": {"parent_traj_id": "a", '
        b'"full_versions": [' % group + b",".join([pair] * pairs) + b"]}}\n"
    )


def test_a_record_past_max_spans_is_a_bad_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(GOOD + alternating(1, 3))  # 6 spans
    for lean_min in (1 << 62, 0):  # the whole parse, and the lean one
        monkeypatch.setattr(lean, "LEAN_MIN_BYTES", lean_min)
        with pytest.raises(analysis.errors.LogFormatError, match=r"log.jsonl:2: .*max_spans=5\b"):
            analysis.load_logs([path], max_spans=5)
        report = analysis.LoadReport()
        kept = analysis.load_logs([path], max_spans=5, on_bad_record="skip", report=report)
        assert kept["group_id"].to_list() == ["0"] and sum(report.skipped.values()) == 1
        spans = analysis.load_logs([path], max_spans=6)["version_spans"].list.len()
        assert spans.to_list() == [1, 6]


@pytest.mark.slow
def test_sixteen_million_spans_in_one_line_are_refused_unbuilt(tmp_path: Path) -> None:
    """32 MB of [0,1,0,1,...]: building its spans took 17 s and 1.4 GB; refused now as
    soon as the limit is passed."""
    path = tmp_path / "log.jsonl"
    path.write_bytes(GOOD + alternating(1, 8_000_000))
    run = hostile.run_bounded("replay", str(path), "-k", "1", "-b", "1")
    assert run.code == 5, run.stderr
    assert run.stderr.startswith("Error: ") and run.stderr.count("\n") == 1, run.stderr
    assert f"{path}:2: " in run.stderr and "--limit max_spans=" in run.stderr
    assert run.peak_mb < PEAK_MB and run.cpu_seconds < CPU_SECONDS, run
    skipped = hostile.run_bounded(
        "replay", str(path), "-k", "1", "-b", "1", "--on-bad-record", "skip"
    )
    assert skipped.code == 0, skipped.stderr
    assert skipped.peak_mb < PEAK_MB and skipped.cpu_seconds < CPU_SECONDS, skipped


@pytest.mark.slow
def test_millions_of_spans_below_the_limit_are_read_in_bulk(tmp_path: Path) -> None:
    """A 31 MB line of 7.8 million alternating labels (raised limit), and 30 lines of
    half a million each: 24 s and 2.0 GB, and 11 s and 1.3 GB, before the bulk reading."""
    one = tmp_path / "one.jsonl"
    one.write_bytes(GOOD + alternating(1, 3_900_000, b'"0","1"'))
    many = tmp_path / "many.jsonl"
    with many.open("wb") as out:
        out.write(GOOD)
        for group in range(1, 31):
            out.write(alternating(group, 250_000))
    for path, limit in ((one, "max_spans=8M"), (many, "max_spans=1M")):
        run = hostile.run_bounded(
            "replay", str(path), "-k", "1", "-b", "1", "--limit", limit, "--json"
        )
        assert run.code == 0, run.stderr
        assert run.peak_mb < PEAK_MB and run.cpu_seconds < CPU_SECONDS, (path.name, run)


@pytest.mark.slow
def test_millions_of_distinct_labels_are_judged_in_bulk(tmp_path: Path) -> None:
    """25 lines of 100,000 distinct labels each (24 MB, 2.5 million versions): each label
    was judged and ordered in Python, past 60 s and 2 GB; a line of a million took 31 s."""
    path = tmp_path / "log.jsonl"
    with path.open("wb") as out:
        out.write(GOOD)
        for group in range(1, 26):
            labels = b",".join(b'"%d"' % (group * 100_000 + i) for i in range(100_000))
            out.write(
                b'{"group_index": %d, "rollout_id": 1, "metadata": {"parent_traj_id": "a", '
                b'"full_versions": [%s]}}\n' % (group, labels)
            )
    for args in (["inspect"], ["replay", "-k", "1", "-b", "1"], ["sweep", "-b", "1"]):
        run = hostile.run_bounded(*args, str(path))
        assert run.code == 0, (args, run.stderr)
        assert run.peak_mb < PEAK_MB and run.cpu_seconds < CPU_SECONDS, (args, run)


@pytest.mark.slow
def test_a_dump_of_sixteen_million_spans_is_refused_at_the_limit(tmp_path: Path) -> None:
    """A 30 MB pickled dump of one sample of 16 million alternating versions: its spans
    were all built (1.5 GB) before the record was refused; now only the limit's."""
    import pickle

    samples = [{"group_index": 0, "index": 0, "metadata": {"parent_traj_id": "t",
                "full_versions": [0, 1] * 8_000_000}}]  # fmt: skip
    path = tmp_path / "0.pkl"
    path.write_bytes(pickle.dumps({"rollout_id": 0, "samples": samples}, protocol=2))
    del samples
    run = hostile.run_bounded("replay", str(path), "-k", "1", "-b", "1")
    assert run.code == 5, run.stderr
    assert "sample 1: " in run.stderr and "--limit max_spans=" in run.stderr
    assert run.peak_mb < PEAK_MB and run.cpu_seconds < CPU_SECONDS, run


def test_a_canonical_row_past_max_spans_is_refused(tmp_path: Path) -> None:
    """Parquet and Arrow files are held to max_spans too: from the Parquet metadata when a
    row group holds more than the limit a row (before its rows are read), else once read."""
    import polars as pl

    log = tmp_path / "log.jsonl"
    log.write_bytes(GOOD + alternating(1, 3))  # 1 and 6 spans
    table = analysis.load_logs([log])
    for name, frame, said in (
        ("one.parquet", table.slice(1), "a row group of 1 row holding 6 runs"),  # unread
        ("two.parquet", table, "a row of 6 runs"),  # 7 spans in 2 rows: read, then refused
    ):
        path = tmp_path / name
        frame.write_parquet(path)
        with pytest.raises(analysis.errors.LogFormatError, match=rf"{name}: {said}.*max_spans=5\b"):
            analysis.load_logs([path], max_spans=5)
        assert analysis.load_logs([path], max_spans=6).height == frame.height
    ipc = tmp_path / "log.arrow"
    table.write_ipc(ipc)
    with pytest.raises(analysis.errors.LogFormatError, match=r"log.arrow: .*max_spans=5\b"):
        analysis.load_logs([ipc], max_spans=5)
    assert pl.read_parquet(tmp_path / "two.parquet").height == 2


@pytest.mark.slow
def test_a_parquet_row_of_thirty_million_spans_is_refused_unread(tmp_path: Path) -> None:
    """58 MB of Parquet, one row of 30 million alternating spans: read, it took 2.7 GB."""
    import numpy as np
    import polars as pl

    from analysis.table.schema import SPAN_TYPE

    log = tmp_path / "log.jsonl"
    log.write_bytes(GOOD)
    starts = np.arange(30_000_000, dtype=np.int64)
    spans = pl.DataFrame(
        {"start": starts, "end": starts + 1, "version": np.array(["0", "1"])[starts % 2]}
    )
    del starts
    column = spans.to_struct("version_spans").implode().cast(SPAN_TYPE)
    del spans
    path = tmp_path / "log.parquet"
    analysis.load_logs([log]).with_columns(column).write_parquet(path)
    del column
    run = hostile.run_bounded("replay", str(path), "-k", "1", "-b", "1")
    assert run.code == 5, run.stderr
    assert "--limit max_spans=" in run.stderr and run.stderr.count("\n") == 1
    assert run.peak_mb < PEAK_MB and run.cpu_seconds < CPU_SECONDS, run
