"""The JSONL format: one Dressage or slime record a line, plain or gzipped; a large file is
read on two cores (:mod:`analysis.formats.text.jsonl_parts`)."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import polars as pl

from analysis.formats.frames import columns_frame
from analysis.formats.reading import Format, RawRecords, Reading
from analysis.formats.source import Source
from analysis.formats.text.jsonl import jsonl_records
from analysis.formats.text.jsonl_parts import Piece, Progress, read_in_pieces, split_wanted
from analysis.formats.text.lean import lean_plan
from analysis.table.limits import printable


@dataclass(frozen=True)
class JsonlFormat(Format):
    cut_in_pieces: ClassVar[bool] = True

    def sniff(self, head: bytes) -> bool:
        return head.startswith(b"\x1f\x8b") or head.lstrip()[:1] == b"{"

    def read(
        self, source: Source, reading: Reading, before: int, total: int
    ) -> Iterator[pl.DataFrame]:
        size = _size(source.path)
        if size is not None and split_wanted(source.path, size):
            options, path_text = reading.options, printable(str(source.path))
            yield from read_in_pieces(
                source.path, size, options,
                read_here=lambda piece, within: self.read_piece(source, reading, piece, within),
                flush=lambda: reading.flush(path_text), warn=reading.report.warnings.append,
                frame_of=lambda data: columns_frame(data, options.extra_fields, where=path_text),
                renumber=lambda frame, lines: frame.with_columns(pl.col("record") + lines),
                progress=reading.within(before, total),
            )  # fmt: skip
            return
        yield from reading.records(source, self._lines(source, reading, before, total))

    def read_piece(
        self, source: Source, reading: Reading, piece: Piece, within: Progress | None = None
    ) -> Generator[pl.DataFrame, None, int | None]:
        """The chunks of lines ``piece.first_line`` on, bytes ``piece.start`` to
        ``piece.stop``; returns the lines the piece holds (None: the file broke before its
        end). ``within(bytes read of the piece, file size)`` as it is read."""
        lines = yield from reading.records(
            source, self._lines(source, reading, 0, 1, piece, within)
        )
        return lines

    @staticmethod
    def _lines(
        source: Source, reading: Reading, before: int, total: int, piece: Piece | None = None,
        piece_progress: Progress | None = None,
    ) -> RawRecords:  # fmt: skip
        options = reading.options
        lean = lean_plan(options.fields, options.extra_fields, options.limits.max_spans)
        part = None if piece is None else (piece.start, piece.stop, piece.first_line)
        within = reading.within(before, total) if piece is None else piece_progress
        records = jsonl_records(source.path, options.limits, progress=within, part=part, lean=lean)
        while True:
            try:
                number, record = next(records)
            except StopIteration as end:
                return int(end.value)  # the lines read, for a piece's successor's numbers
            yield f"{source.path}:{number}", number, None, record


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None  # said where the file is read


FORMAT = JsonlFormat(
    name="jsonl",
    described="a JSONL log of Dressage or slime records",
    endings=(".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json.gz"),
    folder_kind="JSONL",
    folder_rank=2,
    reads_alone=True,
)

FORMATS = (FORMAT,)
