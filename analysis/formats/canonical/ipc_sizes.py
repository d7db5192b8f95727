"""What an Arrow IPC file declares it holds, read from its metadata alone.

A compressed IPC file can declare far more than it holds: each record batch states its
rows, and each compressed buffer the length it inflates to in its first 8 bytes, and
pyarrow allocates what they say before it reads a byte of data (50 million rows in
496 MB took 2.7 GB and failed in ``malloc``). This module reads the file's footer and
its batches' message headers (flatbuffers, read here by hand: pyarrow decompresses a
batch to say how long it is) and sums the rows and the inflated bytes they declare,
stopping as soon as a bound is passed.

The layout is Arrow's (format/File.fbs, Message.fbs, Schema.fbs): a file ends with its
footer, a flatbuffer, then the footer's length (int32) and ``ARROW1``; the footer lists
the blocks (offset, metadata length, body length) of the dictionary and record batches;
a block starts with an encapsulated message (0xFFFFFFFF, its length, the flatbuffer
``Message``) followed by the body its buffers are offsets into.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_MAGIC = b"ARROW1"
_RECORD_BATCH, _DICTIONARY_BATCH = 3, 2
"""``MessageHeader`` union members whose bodies hold data."""


class IpcLayoutError(ValueError):
    """The file's metadata is not laid out as Arrow's format says."""


@dataclass
class Declared:
    """What the batches read so far declare."""

    rows: int = 0
    """Rows of the record batches (dictionary batches' values are not rows)."""
    inflated: int = 0
    """Bytes of their buffers once decompressed (as stored, for uncompressed batches)."""


class _Flat:
    """Reads tables, vectors and scalars of one flatbuffer within ``data[start:stop]``."""

    def __init__(self, data: mmap.mmap | bytes, start: int, stop: int) -> None:
        self.data, self.start, self.stop = data, start, stop

    def _unpack(self, fmt: str, at: int) -> int:
        size = struct.calcsize(fmt)
        if not self.start <= at <= self.stop - size:
            raise IpcLayoutError(f"an offset ({at:,}) outside its flatbuffer")
        value: int = struct.unpack_from(fmt, self.data, at)[0]
        return value

    def root(self) -> int:
        return self.start + self._unpack("<I", self.start)

    def field(self, table: int, index: int) -> int | None:
        """Where field ``index`` of the table at ``table`` is, None when absent."""
        vtable = table - self._unpack("<i", table)
        size = self._unpack("<H", vtable)
        if 4 + 2 * index + 2 > size:
            return None
        offset = self._unpack("<H", vtable + 4 + 2 * index)
        return table + offset if offset else None

    def scalar(self, table: int, index: int, fmt: str, default: int = 0) -> int:
        at = self.field(table, index)
        return default if at is None else self._unpack(fmt, at)

    def target(self, table: int, index: int) -> int | None:
        """Where the table, vector or union value field ``index`` points to."""
        at = self.field(table, index)
        return None if at is None else at + self._unpack("<I", at)

    def structs(self, table: int, index: int, fmt: str) -> Iterator[tuple[int, ...]]:
        """The vector of structs of field ``index``, each unpacked with ``fmt`` as it is
        reached (a footer can list millions of blocks: none is copied or held)."""
        at = self.target(table, index)
        if at is None:
            return
        count, size = self._unpack("<I", at), struct.calcsize(fmt)
        if count * size > self.stop - at - 4:
            raise IpcLayoutError("a vector longer than its flatbuffer")
        for item in range(at + 4, at + 4 + count * size, size):
            yield struct.unpack_from(fmt, self.data, item)


_BLOCK = "<qi4xq"
"""A footer block: offset, metadata length, (padding), body length."""
_BUFFER = "<qq"
"""A record batch's buffer: offset into the body, length."""


def declared_sizes(path: Path, rows_bound: int, bytes_bound: int) -> Declared:
    """The rows and inflated bytes an IPC file's batches declare, summed until either
    passes its bound (then what was summed so far: enough to refuse the file).

    Raises :class:`IpcLayoutError` when the metadata is not as Arrow's format says (a
    file pyarrow opened is: a hostile footer that only looks right stops here)."""
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        size = len(data)
        if size < 2 * len(_MAGIC) + 4 or data[size - len(_MAGIC) :] != _MAGIC:
            raise IpcLayoutError("no Arrow IPC file footer")
        length = struct.unpack_from("<i", data, size - len(_MAGIC) - 4)[0]
        start = size - len(_MAGIC) - 4 - length
        if length <= 0 or start < 0:
            raise IpcLayoutError("a footer length outside the file")
        footer = _Flat(data, start, start + length)
        table = footer.root()
        declared = Declared()
        for rows, index in ((True, 3), (False, 2)):  # record batches, then dictionaries
            end = 0
            for offset, metadata, body in footer.structs(table, index, _BLOCK):
                if offset < end:  # (one batch listed many times would be read as many)
                    raise IpcLayoutError(f"a batch block ({offset:,}) within the one before")
                _add_batch(data, (offset, metadata, body), rows, declared)
                end = offset + metadata + body
                if declared.rows > rows_bound or declared.inflated > bytes_bound:
                    return declared
        return declared


def _add_batch(
    data: mmap.mmap, block: tuple[int, int, int], rows: bool, declared: Declared
) -> None:
    """Add what one block's batch declares (its rows only when ``rows``: a dictionary
    batch's values are no rows of the table)."""
    offset, metadata, body = block
    if offset < 0 or metadata < 8 or offset + metadata + body > len(data):
        raise IpcLayoutError(f"a batch block ({offset:,}) outside the file")
    first = struct.unpack_from("<i", data, offset)[0]
    start = offset + 8 if first == -1 else offset + 4  # (before Arrow 0.15: no marker)
    message = _Flat(data, start, offset + metadata)
    root = message.root()
    kind = message.scalar(root, 1, "<B")
    header = message.target(root, 2)
    if header is None or kind not in (_RECORD_BATCH, _DICTIONARY_BATCH):
        raise IpcLayoutError(f"a batch block ({offset:,}) that holds no batch")
    if kind == _DICTIONARY_BATCH:  # DictionaryBatch { id, data: RecordBatch, isDelta }
        header = message.target(header, 1)
        if header is None:
            raise IpcLayoutError(f"a dictionary batch ({offset:,}) without its data")
    if rows:
        declared.rows += max(0, message.scalar(header, 0, "<q"))
    buffers = message.structs(header, 2, _BUFFER)
    body_start = offset + metadata
    if message.field(header, 3) is None:  # no BodyCompression: stored as it is
        declared.inflated += sum(max(0, length) for _, length in buffers)
        return
    for where, length in buffers:
        if length < 8:
            continue  # empty (0), or damaged: pyarrow says so when it reads it
        if where < 0 or where + length > body:
            raise IpcLayoutError(f"a buffer of the batch at {offset:,} outside its body")
        inflated = struct.unpack_from("<q", data, body_start + where)[0]
        declared.inflated += length - 8 if inflated == -1 else max(0, inflated)
