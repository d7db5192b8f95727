"""Streams and sizes an attacker (or an unlucky shell) might hand the readers (issue 18):
pipes and FIFOs read once, progress on gzip input by compressed bytes, limits as settings."""

from __future__ import annotations

import gzip
import os
import threading
from pathlib import Path

import pytest

import analysis
from analysis.errors import ConfigError, DamagedFileError, SettingSyntaxError, SkipReason
from analysis.formats.text.jsonl import jsonl_records
from analysis.output.raw_logs import write_jsonl
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.simulator import simulate
from analysis.table.limits import LimitError, Limits

RECORDS = list(simulate(SimulationConfig(n_groups=40, n_samples_per_prompt=2, seed=3)))


def _log(folder: Path) -> tuple[Path, bytes]:
    path = folder / "log.jsonl"
    write_jsonl(RECORDS, path)
    return path, path.read_bytes()


def test_gzip_progress_counts_compressed_bytes(tmp_path: Path) -> None:
    _, text = _log(tmp_path)
    packed = tmp_path / "big.jsonl.gz"
    packed.write_bytes(gzip.compress(text * 8, compresslevel=1))
    seen: list[tuple[int, int]] = []
    count = sum(1 for _ in jsonl_records(packed, progress=lambda d, t: seen.append((d, t))))
    assert count == 8 * len(RECORDS)
    size = packed.stat().st_size
    assert seen[-1] == (size, size) and len(seen) >= 2
    assert all(total == size for _, total in seen)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    # load_logs reports the file's bytes as parts of its source (per mille of a file)
    calls: list[tuple[int, int]] = []
    analysis.load_logs([packed, packed], progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (2000, 2000) and {total for _, total in calls} == {2000}  # one unit
    within = [done for done, total in calls if total == 2000]
    assert within == sorted(within)
    assert any(0 < done < 1000 for done in within) and any(1000 < done < 2000 for done in within)


@pytest.mark.parametrize("compressed", [False, True])
def test_a_fifo_is_read_once_whole(tmp_path: Path, compressed: bool) -> None:
    """A probe that opened it first would take its first bytes (or kill its writer)."""
    path, text = _log(tmp_path)
    fifo = tmp_path / "stream"  # no extension: the format is not guessed by opening it
    os.mkfifo(fifo)
    data = gzip.compress(text) if compressed else text

    def write() -> None:
        with open(fifo, "wb") as out:
            out.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    table = analysis.load_logs([fifo])
    writer.join(timeout=30)
    assert table.drop("source").equals(analysis.load_logs([path]).drop("source"))


def test_a_pipe_given_as_dev_fd_is_read_once(tmp_path: Path) -> None:
    """``<(gzip -c log)`` hands the tool /dev/fd/N, a pipe."""
    _, text = _log(tmp_path)
    read_end, write_end = os.pipe()
    data = gzip.compress(text)

    def write() -> None:
        with os.fdopen(write_end, "wb") as out:
            out.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        table = analysis.load_logs([f"/dev/fd/{read_end}"])
    finally:
        writer.join(timeout=30)
        os.close(read_end)
    assert table.height == len(RECORDS)


def test_limits_are_settings_with_checked_values(tmp_path: Path) -> None:
    assert Limits.parse(["max_record_bytes=2K", "max-depth=7"]) == {
        "max_record_bytes": 2048,
        "max_depth": 7,
    }
    for bad in (["max_record_bytes"], ["size=3"], ["max_depth=-1"], ["max_depth=1.5"]):
        with pytest.raises(SettingSyntaxError):
            Limits.parse(bad)
    with pytest.raises(ConfigError, match="max_inflation"):
        analysis.ReadOptions(max_inflation=0)
    path, _ = _log(tmp_path)
    longest = max(len(line) for line in path.read_bytes().splitlines())
    with pytest.raises(LimitError, match="max_record_bytes=") as caught:
        analysis.load_logs([path], max_record_bytes=longest - 1)
    assert "max_record_bytes=" in str(caught.value)
    assert analysis.load_logs([path], max_record_bytes=longest + 1).height == len(RECORDS)
    skipped = analysis.LoadReport()
    analysis.load_logs([path], max_record_bytes=longest - 1, on_bad_record="skip", report=skipped)
    assert skipped.skipped[SkipReason.DAMAGED_FILE] >= 1


def test_the_documented_limits_table_matches_the_code() -> None:
    import re

    page = Path(__file__).resolve().parents[2] / "docs" / "pages" / "reference" / "limits.md"
    section = page.read_text().split("## Limits", 1)[1].split("Beside these", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", section, re.MULTILINE)
    assert [name for name, _ in rows] == list(Limits.names())
    shown = {
        "32 MiB": 32 << 20, "100": 100, "134,217,728 (2^27)": 1 << 27,
        "1,048,576 (2^20)": 1 << 20, "512 MiB": 512 << 20,
    }  # fmt: skip
    for name, default in rows:
        text = default.strip()
        assert (shown[text] if text in shown else int(text)) == getattr(Limits(), name)


@pytest.mark.parametrize("compressed", [False, True])
def test_runs_of_blank_lines_are_read_in_bulk_and_counted(tmp_path: Path, compressed: bool) -> None:
    """A file of newlines was read a line at a time (3.5 MB/s: 100 MB took 28 s); the
    lines after such a run keep their numbers."""
    path, text = _log(tmp_path)
    first, *rest = text.splitlines(keepends=True)
    blanks = b"\n" * 100_000 + b" \t\r\n" * 3 + b"\r\n" * 70_000 + b"   \n"
    data = first + blanks + b"".join(rest) + b"\n" * 5 + b"{bad\n" + b"\n\n"
    if compressed:
        path = tmp_path / "log.jsonl.gz"
        data = gzip.compress(data)
    path.write_bytes(data)
    read = jsonl_records(path)
    numbers = []
    while True:
        try:
            numbers.append(next(read)[0])
        except StopIteration as end:
            lines = end.value
            break
    gap = 1 + 100_000 + 3 + 70_000 + 1
    assert numbers == [1, *range(gap + 1, gap + len(rest) + 1), gap + len(rest) + 6]
    assert lines == gap + len(rest) + 8


def _numbered(path: Path, **options: object) -> list[tuple[int, object]]:
    return [(n, r if isinstance(r, dict) else str(r)) for n, r in jsonl_records(path, **options)]  # type: ignore[arg-type]


def test_a_gzip_file_of_many_members_reads_as_one(tmp_path: Path) -> None:
    """Concatenated gzip files (``cat a.gz b.gz``, a logger that compresses each flush) are
    one stream: lines across members, members larger than zlib is fed at once, empty
    members and zero padding between them, as Python's gzip module reads them."""
    path, text = _log(tmp_path)
    pieces, at = [], 0
    for size in [1, 7, 1000, 20_000, 3, 100_000] * 50:
        pieces.append(text[at : at + size])
        at += size
    pieces.append(text[at:])
    packed = tmp_path / "log.jsonl.gz"
    packed.write_bytes(
        b"".join(
            gzip.compress(piece, mtime=0) + (b"\0" * 5 if i % 7 == 3 else b"")
            + (gzip.compress(b"") if i % 5 == 1 else b"")
            for i, piece in enumerate(pieces)
        )
    )  # fmt: skip
    assert _numbered(packed) == _numbered(path) and len(_numbered(path)) == len(RECORDS)


def test_a_gzip_member_cut_or_damaged_ends_after_the_records_before_it(tmp_path: Path) -> None:
    _, text = _log(tmp_path)
    lines = text.splitlines(keepends=True)
    members = [gzip.compress(line, mtime=0) for line in lines]
    path = tmp_path / "log.jsonl.gz"
    damaged = bytearray(members[30])
    damaged[-6] ^= 0xFF  # its CRC
    cases = {
        "cut": (b"".join(members)[:-5], len(lines), "ended before the end-of-stream"),
        "crc": (b"".join([*members[:30], bytes(damaged), *members[31:]]), 30, "incorrect data"),
        "trailing": (b"".join(members) + b"garbage", len(lines), "incorrect header"),
    }
    for name, (data, before, words) in cases.items():
        path.write_bytes(data)
        read = jsonl_records(path)
        numbers = []
        with pytest.raises(DamagedFileError, match=words) as caught:
            for number, _ in read:
                numbers.append(number)
        assert numbers == list(range(1, before + 1)), name
        assert str(caught.value).startswith(f"{path}: cannot be read as (gzipped) JSONL (")


def test_a_probe_reads_only_the_first_members_of_a_gzip_file(tmp_path: Path) -> None:
    _, text = _log(tmp_path)
    lines = text.splitlines(keepends=True)
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(b"".join(gzip.compress(line) for line in lines))
    assert [n for n, _ in jsonl_records(path, members=3)] == [1, 2, 3]
    assert len(list(jsonl_records(path))) == len(lines)


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_an_arrow_file_declares_its_rows_and_inflated_bytes(
    tmp_path: Path, compression: str | None
) -> None:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from analysis.formats.canonical.ipc_sizes import declared_sizes

    values = pa.array([f"value {i % 7}" for i in range(30_000)])
    table = pa.table({"n": pa.array(range(30_000)), "s": values, "d": values.dictionary_encode()})
    path = tmp_path / "t.arrow"
    options = ipc.IpcWriteOptions(compression=compression)
    with ipc.new_file(path, table.schema, options=options) as writer:
        for start in range(0, 30_000, 7_000):
            writer.write_table(table.slice(start, 7_000))
    declared = declared_sizes(path, 1 << 40, 1 << 40)
    assert declared.rows == 30_000
    # Every buffer as pyarrow holds it, within its padding to 8 bytes (and the dictionary).
    assert table.nbytes <= declared.inflated <= table.nbytes + 8 * 9 * 5 + 1_000
    if compression:
        assert declared.inflated > 2 * path.stat().st_size
    stopped = declared_sizes(path, 1, 1 << 40)
    assert stopped.rows == 7_000  # summed no further than past the bound


def test_an_arrow_file_listing_one_batch_many_times_is_damaged(tmp_path: Path) -> None:
    """Its footer lists the first batch in place of the second: read twice as many times
    as listed, a footer of millions of blocks would be millions of reads of one batch."""
    import struct

    import pyarrow as pa
    import pyarrow.ipc as ipc

    from analysis.formats.canonical.ipc_sizes import IpcLayoutError, declared_sizes

    table = pa.table({"n": pa.array(range(1000))})
    path = tmp_path / "t.arrow"
    with ipc.new_file(path, table.schema) as writer:
        writer.write_table(table)
        writer.write_table(table)
    data = bytearray(path.read_bytes())
    assert declared_sizes(path, 1 << 40, 1 << 40).rows == 2000
    first = 16 + struct.unpack_from("<i", data, 12)[0]  # past the schema's message
    footer = len(data) - 10 - struct.unpack_from("<i", data, len(data) - 10)[0]
    block = data.index(struct.pack("<q", first), footer)
    data[block + 24 : block + 48] = data[block : block + 24]
    path.write_bytes(bytes(data))
    assert len(ipc.open_file(path).read_all()) == 2000  # (pyarrow reads it)
    with pytest.raises(IpcLayoutError, match="within the one before"):
        declared_sizes(path, 1 << 40, 1 << 40)
    with pytest.raises(DamagedFileError, match="within the one before"):
        analysis.load_logs([path])
