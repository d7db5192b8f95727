"""The convert pipeline: logs streamed into one canonical Parquet/Arrow file, a chunk at a
time, published only once whole."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from analysis.errors import LogFormatError
from analysis.formats.canonical.reader import SOURCE_FORMATS_KEY
from analysis.formats.load import iter_log_chunks, report_missing_extra_fields
from analysis.formats.load_report import LoadReport
from analysis.output.atomic import atomic_path
from analysis.output.checks import check_output
from analysis.table.options import ReadOptions
from analysis.table.schema import CANONICAL_SCHEMA

CANONICAL_FORMATS = (".parquet", ".arrow", ".ipc", ".feather")
"""What the canonical table (``convert``) is written as."""


def write_canonical(table: pl.DataFrame, path: Path, *, inputs: Iterable[Path] = ()) -> None:
    """Write the canonical table as Parquet or Arrow IPC, for fast loading next time."""
    write_canonical_chunks([table], path, inputs=inputs)


def write_canonical_chunks(
    chunks: Iterable[pl.DataFrame],
    path: Path,
    *,
    inputs: Iterable[Path] = (),
    formats: Callable[[], Sequence[str]] | None = None,
) -> int:
    """Write canonical chunks one after another (memory: one chunk); return the row count.

    ``formats``: the formats the rows were read from, asked once the first chunk is read
    and kept in the file's metadata (``SOURCE_FORMATS_KEY``), so that reading the file
    tells what its source could and could not tell (an other system's log).

    The file appears only once every chunk is written: an error or Ctrl-C midway leaves
    nothing behind.
    """
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    path = Path(path)
    check_output(path, CANONICAL_FORMATS, what="canonical table", inputs=inputs)
    suffix = path.suffix.lower()
    rows = 0
    with atomic_path(path) as temp:
        writer: Any = None
        schema: Any = None

        def open_writer(schema: Any) -> Any:
            if suffix == ".parquet":
                return pq.ParquetWriter(temp, schema)
            return ipc.new_file(str(temp), schema)

        try:
            for chunk in chunks:
                arrow = chunk.to_arrow()
                if writer is None:
                    schema = arrow.schema
                    if formats is not None and (found := formats()):
                        schema = schema.with_metadata({SOURCE_FORMATS_KEY: ",".join(found)})
                    writer = open_writer(schema)
                try:
                    arrow = arrow.cast(schema)
                except Exception as exc:
                    raise LogFormatError(
                        f"{path}: later records disagree with earlier ones on column types "
                        f"({exc}); convert the inputs separately"
                    ) from exc
                writer.write_table(arrow)
                rows += chunk.height
            if writer is None:  # no records: still a valid, empty canonical file
                writer = open_writer(pl.DataFrame(schema=CANONICAL_SCHEMA).to_arrow().schema)
        finally:
            if writer is not None:
                writer.close()
    return rows


def convert_logs(
    inputs: Sequence[str | Path],
    output: Path,
    options: ReadOptions | None = None,
    *,
    report: LoadReport | None = None,
    **settings: Any,
) -> int:
    """Stream inputs into one canonical Parquet/Arrow file, a chunk at a time; return rows.

    ``options`` (or its settings as keywords) say how to read, as for :func:`load_logs`.
    """
    options = ReadOptions.of(options, **settings)
    report = report if report is not None else LoadReport()

    def checked() -> Iterator[pl.DataFrame]:
        missing = dict.fromkeys(options.extra_fields, 0)
        total = 0
        for chunk in iter_log_chunks(inputs, options, report=report):
            total += chunk.height
            for name in missing:
                missing[name] += chunk[name].null_count()
            yield chunk
        # Raised before the file is renamed into place, so a refused field leaves no output.
        report_missing_extra_fields(missing, total, report)

    return write_canonical_chunks(
        checked(), output, inputs=[Path(i) for i in inputs], formats=lambda: report.formats
    )
