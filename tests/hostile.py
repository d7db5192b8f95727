"""Small generators of hostile inputs (bombs are made at test time, never committed) and a
runner that measures a command's peak memory and CPU time.

Memory is measured as the child's peak resident size, from ``os.wait4``'s resource usage
(``ru_maxrss``, the kernel's own count) in a small launcher (:mod:`tests.launch`), so that
pytest's own memory is not counted; an address-space limit (``RLIMIT_AS``, 3 GB, set in
the child by the launcher) keeps a regression from taking the machine down, and a
timeout (:data:`HANG_SECONDS`) from running on.

Time is measured as the command's CPU time (user and system, its threads and helper
processes included), from the same resource usage: with two CPU-bound jobs beside the
tests on this 2-core host, the commands here took up to three and a half times as long on
the clock (a report: 24 s, 7 s alone) while their CPU time stayed within a third of its
figure on a quiet host (the report: 7.4 s, 6.9 s). Tests must not fail because the host
is busy; the time a user waits is a benchmark's (``make bench``).
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = Path(__file__).resolve().with_name("launch.py")
HANG_SECONDS = 120.0
"""When a measured command is killed: a ceiling that only a hang or a runaway passes (the
commands here take 0.4-7 s on a quiet host); the killed command's exit code is -9."""
GUARD_BYTES = 3 << 30
"""Address space a hostile run may map: well above what a bounded run needs (polars and
its threads map ~1 GB they never touch), well below what would harm the machine."""


@dataclass
class Run:
    code: int
    stderr: str
    seconds: float
    """Time on the clock: grows with the host's load, so only a ceiling for a hang."""
    peak_mb: float
    cpu_seconds: float
    """User and system time of the command (its threads and helper processes included):
    what the tests bound, as it hardly depends on what else runs on the host."""


def run_bounded(*args: str, timeout: float = HANG_SECONDS, cwd: Path = ROOT) -> Run:
    """Run ``dressage-replay args`` in a child process; its exit code, stderr, time and
    peak resident memory.

    Started by :mod:`tests.launch`, a script that imports only built-in modules: Linux
    counts a forked child's resident size from its parent's and keeps the highest figure
    across ``exec``, so a child forked by pytest itself was measured with pytest's pages
    (a pytest holding 600 MB more measured ``--help`` at 765 MB, not 165)."""
    env = {**os.environ, "POLARS_MAX_THREADS": "2", "RAYON_NUM_THREADS": "2"}
    command = [sys.executable, "-m", "cli", *args]
    return run_measured(command, timeout=timeout, cwd=cwd, env=env)


def run_measured(
    command: list[str],
    *,
    timeout: float = HANG_SECONDS,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
) -> Run:
    """Run ``command`` through :mod:`tests.launch`: its exit code, stderr, times and peak
    resident memory (its own, from ~10 MB of the launcher's)."""
    launcher = [sys.executable, "-S", str(LAUNCHER), str(GUARD_BYTES), str(timeout)]
    start = time.monotonic()
    done = subprocess.run(
        [*launcher, *command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, timeout=timeout + 30, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - start
    stderr = done.stderr.decode("utf-8", "replace")
    report = done.stdout.split()
    assert done.returncode == 0 and len(report) >= 3, (done, stderr)
    status, peak_kib, cpu = int(report[-3]), int(report[-2]), float(report[-1])
    run = Run(os.waitstatus_to_exitcode(status), stderr, seconds, peak_kib / 1024, cpu)
    return run


# --------------------------------------------------------------------------- pickles

PROTO = b"\x80\x02"


def _u4(n: int) -> bytes:
    return n.to_bytes(4, "little")


def laughs(levels: int = 40) -> bytes:
    """A "billion laughs": list i holds list i-1 twice, through the memo (2**levels
    references to one string, in a few hundred bytes)."""
    out = [PROTO, b"X", _u4(5), b"hello", b"r", _u4(0), b"0"]
    for i in range(1, levels + 1):
        out += [b"]r", _u4(i), b"(j", _u4(i - 1), b"j", _u4(i - 1), b"e0"]
    out += [b"j", _u4(levels), b"."]
    return b"".join(out)


def memo_reuse(text_bytes: int = 1 << 20, references: int = 100_000) -> bytes:
    """One memoised string of ``text_bytes`` referenced ``references`` times in a list."""
    return b"".join(
        [PROTO, b"X", _u4(text_bytes), b"a" * text_bytes, b"r", _u4(0), b"0](",
         b"h\x00" * references, b"e."]
    )  # fmt: skip


def memo_samples(tokens: int = 4000, references: int = 8000) -> bytes:
    """A pickled dump whose samples are one sample of ``tokens`` tokens (mask, log-probs,
    alternating token versions) referenced ``references`` times through the memo."""
    import pickle

    half = tokens // 2
    sample = {
        "group_index": 0, "index": 0, "tokens": [1] * tokens, "response_length": tokens,
        "loss_mask": [1] * tokens, "rollout_log_probs": [-0.1] * tokens,
        "metadata": {"parent_traj_id": "t", "full_versions": [0, 1] * half,
                     "dressage_end_token_version": "1"},
    }  # fmt: skip
    return pickle.dumps({"rollout_id": 0, "samples": [sample] * references}, protocol=2)


def huge_memo(index: int = 10**8) -> bytes:
    """A memo slot far past any object: the unpickler would grow its table to twice it."""
    return PROTO + b"]r" + _u4(index) + b"."


def deep_lists(depth: int = 100_000) -> bytes:
    """Lists nested ``depth`` deep."""
    return PROTO + b"]" * depth + b"a" * (depth - 1) + b"."


def self_containing() -> bytes:
    """A list that contains itself."""
    return PROTO + b"]q\x00h\x00a."


def dump_of(samples_pickle: bytes) -> bytes:
    """A pickled ``{"rollout_id": 0, "samples": <the pickled value>}`` (``samples_pickle``
    without its protocol and STOP)."""
    body = samples_pickle.removeprefix(PROTO).removesuffix(b".")
    return PROTO + b"}(X" + _u4(10) + b"rollout_id" + b"K\x00X" + _u4(7) + b"samples" + body + b"u."


def deflated_pt(inflated: int = 32 << 20) -> bytes:
    """A torch.save-shaped archive whose data.pkl inflates ``inflated`` bytes from ~1000
    times fewer (a zip bomb of a dump)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("archive/data.pkl", "w", force_zip64=True) as member:
            member.write(PROTO + b"X" + _u4(inflated - 8))
            chunk = b"a" * (1 << 20)
            for _ in range(inflated >> 20):
                member.write(chunk)
        archive.writestr("archive/version", b"3\n")
    return buffer.getvalue()


def compressed_pt(method: int, inflated: int = 64 << 20) -> bytes:
    """A torch.save-shaped archive whose data.pkl (a text of ``inflated`` bytes) is
    compressed with zipfile's ``method`` (bzip2 or lzma: a few KB for 64 MiB)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        with archive.open("archive/data.pkl", "w", force_zip64=True) as member:
            member.write(PROTO + b"X" + _u4(inflated - 8))
            chunk = b"a" * (1 << 20)
            for _ in range(inflated >> 20):
                member.write(chunk)
        archive.writestr("archive/version", b"3\n")
    return buffer.getvalue()


# --------------------------------------------------------------------------- gzip


def gzip_of(pieces: list[tuple[bytes, int]]) -> bytes:
    """A gzip stream of each piece repeated its number of times, compressed as written
    (no bomb is held in memory whole)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9, mtime=0) as stream:
        for piece, times in pieces:
            block = piece * max(1, (1 << 20) // max(len(piece), 1))
            whole, rest = divmod(times * len(piece), len(block))
            for _ in range(whole):
                stream.write(block)
            stream.write(block[:rest])
    return buffer.getvalue()


def storages_pt(count: int, numel: int = 1 << 24, kind: str = "DoubleStorage") -> bytes:
    """A torch.save-shaped archive whose data.pkl names ``count`` storages of ``numel``
    values each, every one a deflated member of zeros, and no tensor using them (each
    storage within the per-array bound; ten of doubles are 1.3 GB from 1.3 MB)."""

    def text(value: str) -> bytes:
        return b"X" + _u4(len(value)) + value.encode()

    named = b"".join(
        b"(" + text("storage") + b"ctorch\n" + kind.encode() + b"\n" + text(str(key))
        + text("cpu") + b"J" + _u4(numel) + b"tQ"
        for key in range(count)
    )  # fmt: skip
    size = numel * {"DoubleStorage": 8, "FloatStorage": 4, "ByteStorage": 1}[kind]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(
            "archive/data.pkl",
            PROTO + b"}(" + text("rollout_id") + b"K\x00" + text("samples") + b"(" + named + b"lu.",
        )
        chunk = bytes(1 << 20)
        for key in range(count):
            with archive.open(f"archive/data/{key}", "w", force_zip64=True) as member:
                for start in range(0, size, len(chunk)):
                    member.write(chunk[: size - start])
        archive.writestr("archive/version", b"3\n")
    return buffer.getvalue()


def lying_member_pt(inflated: int = 64 << 20, member: str = "data.pkl") -> bytes:
    """A torch.save-shaped archive whose ``data.pkl`` (or the storage ``data/0`` it names,
    16 bytes) declares a few bytes in its headers and inflates ``inflated`` zeros."""
    import struct
    import zlib

    def text(value: str) -> bytes:
        return b"X" + _u4(len(value)) + value.encode()

    pickled = (
        PROTO + b"}(" + text("rollout_id") + b"K\x00" + text("samples") + b"((" + text("storage")
        + b"ctorch\nByteStorage\n" + text("0") + text("cpu") + b"K\x10tQlu."
    )  # fmt: skip
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    bomb = b"".join(squeeze.compress(bytes(1 << 20)) for _ in range(inflated >> 20))
    bomb += squeeze.flush()
    honest = zlib.compressobj(9, zlib.DEFLATED, -15)
    packed = honest.compress(pickled) + honest.flush()
    members = [
        ("archive/data.pkl", *((bomb, 100, 0) if member == "data.pkl" else (packed, len(pickled), zlib.crc32(pickled)))),
        ("archive/data/0", bomb, 16, 0),
    ]  # fmt: skip
    local, central = b"", b""
    for name, data, size, crc in members:
        where, named = len(local), name.encode()
        head = struct.pack("<HHHHIIIHH", 0, 8, 0, 0, crc, len(data), size, len(named), 0)
        local += b"PK\x03\x04" + struct.pack("<H", 20) + head + named + data
        central += b"PK\x01\x02" + struct.pack("<HH", 20, 20) + head + b"\0" * 10
        central += struct.pack("<I", where) + named
    end = struct.pack("<HHHHIIH", 0, 0, len(members), len(members), len(central), len(local), 0)
    return local + central + b"PK\x05\x06" + end


def repeated_row_parquet(path: Path, canonical: Path, rows: int = 1 << 20) -> None:
    """A canonical Parquet file of ``rows`` copies of the first row of ``canonical`` (a
    converted log): each column a run of one value, a few bytes in all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(canonical)
    block = table.slice(0, 1).take(pa.array([0] * (1 << 18)))
    with pq.ParquetWriter(path, table.schema, compression="zstd") as writer:
        for _ in range(rows >> 18):
            writer.write_table(block)


def repeated_row_ipc(path: Path, canonical: Path, rows: int = 1 << 20) -> None:
    """An Arrow IPC file (zstd-compressed, as polars and pyarrow write one) of ``rows``
    copies of the first row of ``canonical`` (a converted log): its batches declare some
    300 bytes a row in a few bytes."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    table = pq.read_table(canonical)
    block = table.slice(0, 1).take(pa.array([0] * (1 << 18)))
    options = ipc.IpcWriteOptions(compression="zstd")
    with ipc.new_file(path, table.schema, options=options) as writer:
        for _ in range(rows >> 18):
            writer.write_table(block)


def one_row_batches_ipc(path: Path, canonical: Path, batches: int = 20_000) -> None:
    """An LZ4-compressed Arrow IPC file of ``batches`` batches of one row each (the first
    row of ``canonical``), some 2.6 KB a batch."""
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    table = pq.read_table(canonical).slice(0, 1)
    (batch,) = table.to_batches()
    options = ipc.IpcWriteOptions(compression="lz4")
    with ipc.new_file(path, table.schema, options=options) as writer:
        for _ in range(batches):
            writer.write_batch(batch)


def lying_buffer_ipc(path: Path, canonical: Path, declared: int = 1 << 40) -> None:
    """A small zstd-compressed Arrow IPC file of the first rows of ``canonical`` whose
    first compressed buffer declares ``declared`` bytes once decompressed (its first 8
    bytes, just before the zstd frame's magic number)."""
    repeated_row_ipc(path, canonical, 1 << 18)
    data = bytearray(path.read_bytes())
    frame = data.index(b"\x28\xb5\x2f\xfd")
    assert 0 < int.from_bytes(data[frame - 8 : frame], "little") < 1 << 30
    data[frame - 8 : frame] = declared.to_bytes(8, "little")
    path.write_bytes(bytes(data))


def many_members_pt(count: int = 20_000, name_length: int = 420) -> bytes:
    """A zip archive whose central directory lists ``count`` members (each of a name of
    ``name_length`` bytes, all pointing at one empty member) besides a data.pkl: a list
    of members megabytes long in a file barely larger."""
    import struct
    import zlib

    pickled = PROTO + b"}."
    local = b""
    entries = []
    for name, data in ((b"a" * name_length, b""), (b"archive/data.pkl", pickled)):
        entries.append((name, data, len(local)))
        head = struct.pack(
            "<HHHHIIIHH", 0, 0, 0, 0, zlib.crc32(data), len(data), len(data), len(name), 0
        )
        local += b"PK\x03\x04" + struct.pack("<H", 20) + head + name + data
    central = []
    for name, data, where in entries:
        head = struct.pack(
            "<HHHHIIIHH", 0, 0, 0, 0, zlib.crc32(data), len(data), len(data), len(name), 0
        )
        central.append(
            b"PK\x01\x02"
            + struct.pack("<HH", 20, 20)
            + head
            + b"\0" * 10
            + struct.pack("<I", where)
            + name
        )
    listing = central[0] * count + central[1]
    total = count + 1
    end = struct.pack("<HHHHIIH", 0, 0, total, total, len(listing), len(local), 0)
    return local + listing + b"PK\x05\x06" + end


# --------------------------------------------------------------------------- sizes


def version_flood(path: Path, groups: int, *, most_trajectories: int = 1, seed: int = 0) -> Path:
    """A JSONL log of ``groups`` groups, each its own end version (``str(i)``): a version
    per group, hundreds of thousands of versions within every input limit. Otherwise
    realistic: 1 to ``most_trajectories`` trajectories per group (the same for a given
    seed), trainer steps, response lengths and rewards, every fourth trajectory started
    on the previous version (a span of 2, one switch) and one group in 50 aborted."""
    import random

    draw = random.Random(seed)
    with path.open("w") as out:
        index = 0
        for group in range(groups):
            for trajectory in range(draw.randint(1, most_trajectories)):
                length = draw.randint(1, 200)
                meta: dict[str, object] = {
                    "parent_traj_id": f"g{group}-{trajectory}",
                    "dressage_end_token_version": str(group),
                    "dressage_return_rollout_id": group // 8,
                }
                if group and index % 4 == 0 and length > 1:
                    cut = draw.randint(1, length - 1)
                    meta["version_spans"] = [
                        {"start": 0, "end": cut, "version": str(group - 1)},
                        {"start": cut, "end": length, "version": str(group)},
                    ]
                record: dict[str, object] = {
                    "group_index": group,
                    "index": index,
                    "response_length": length,
                    "reward": round(draw.random(), 3),
                    "status": "aborted" if group % 50 == 49 else "completed",
                    "metadata": meta,
                }
                out.write(orjson_line(record))
                index += 1
    return path


def orjson_line(record: dict[str, object]) -> str:
    import orjson

    return orjson.dumps(record).decode() + "\n"
