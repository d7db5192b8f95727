"""The canonical formats: Parquet and Arrow IPC files as ``convert`` writes them (or a
folder of Parquet parts), read as tables, not record by record."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl

from analysis.errors import LogFormatError
from analysis.formats.canonical.reader import read_canonical, source_formats
from analysis.formats.reading import Format, Reading
from analysis.formats.source import Source

_FIELDS_UNUSED = (
    "canonical Parquet/Arrow input",
    "its fields were found when it was converted; convert the log again with it",
)


@dataclass(frozen=True)
class TableFormat(Format):
    def read(
        self, source: Source, reading: Reading, before: int, total: int
    ) -> Iterator[pl.DataFrame]:
        yield from reading.flush(str(source.path))
        options, report = reading.options, reading.report
        try:
            table = read_canonical(source, options.extra_fields, options.columns, options.limits)
        except LogFormatError as error:
            reading.skip_or_raise(error)
            return
        new = [name for name in source_formats(source) if name not in report.converted_from]
        report.converted_from += new
        report.warnings += reading.versionless(new)  # as when the source itself is read
        yield table


PARQUET = TableFormat(
    name="parquet",
    described="a Parquet file",
    endings=(".parquet",),
    magic=(b"PAR1",),
    fields_unused=_FIELDS_UNUSED,
    folder_kind="Parquet/Arrow",
    folder_rank=3,
    reads_alone=True,
)
IPC = TableFormat(
    name="ipc",
    described="an Arrow IPC file",
    endings=(".arrow", ".ipc", ".feather"),
    magic=(b"ARROW1",),
    fields_unused=_FIELDS_UNUSED,
    folder_kind="Parquet/Arrow",
    folder_rank=3,
    reads_alone=True,
)

FORMATS = (PARQUET, IPC)
