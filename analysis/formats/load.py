"""Load rollout logs of every supported format into one canonical table (docs/semantics.md §1).

One row per record (one segment of one trajectory). Token versions are kept only as
run-length spans; an end version derived from them is flagged.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from analysis.errors import Message, MissingFieldError, setting
from analysis.formats.discover import detect_sources, read_as
from analysis.formats.fields import canonical_row
from analysis.formats.frames import KindsSeen, rows_to_frame, stacked, where_from
from analysis.formats.jsonl.format import FORMAT as JSONL
from analysis.formats.load_report import LoadReport
from analysis.formats.reading import Reading
from analysis.formats.registry import BY_NAME, FORMATS
from analysis.formats.source import Source, unreadable_error
from analysis.formats.text.jsonl_parts import Piece
from analysis.table.fieldmap import FieldMap
from analysis.table.options import ReadOptions
from analysis.table.schema import CANONICAL_SCHEMA


def load_logs(
    inputs: Sequence[str | Path] | str | Path,
    options: ReadOptions | None = None,
    *,
    report: LoadReport | None = None,
    **settings: Any,
) -> pl.DataFrame:
    """Read every input, in the order given, into the canonical table.

    ``options`` says how (:class:`ReadOptions`); its settings can also be given as
    keywords (``on_bad_record="skip"``). Pass a :class:`LoadReport` to learn formats,
    skips and warnings.

    Examples
    --------
    >>> import analysis, tempfile, json, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = path.write_text(json.dumps({"group_index": 0, "metadata": {
    ...     "parent_traj_id": "t0", "dressage_end_token_version": "v1"}}) + "\\n")
    >>> analysis.load_logs([path]).select("group_id", "trajectory_id", "end_version").row(0)
    ('0', 't0', 'v1')
    """
    options = ReadOptions.of(options, **settings)
    report = report if report is not None else LoadReport()
    frames = list(iter_log_chunks(_listed(inputs), options, report=report))
    extra = options.extra_fields
    if not frames:
        table = _kept_columns(rows_to_frame([], extra, where=""), options.columns, extra)
    else:
        table = stacked(frames, "inputs")  # their kinds were checked as they came
        check_extra_fields(table, extra, report)
    if table.height == 0:
        report.warnings.append(
            "no records were read"
            + (": every one was skipped" if report.skipped else " from the inputs")
        )
    return table


def check_extra_fields(
    table: pl.DataFrame, extra_fields: Sequence[str], report: LoadReport
) -> None:
    """Refuse an ordering field no record has; warn about records that lack it."""
    missing = {path: table[path].null_count() for path in extra_fields}
    report_missing_extra_fields(missing, table.height, report)


def report_missing_extra_fields(missing: dict[str, int], total: int, report: LoadReport) -> None:
    """Given null counts of extra fields over ``total`` records, refuse or warn."""
    for path, count in missing.items():
        if total and count == total:
            raise MissingFieldError(
                f"no record has the field {path!r}; name a field the log has "
                "(see `dressage-replay inspect`) or drop " + setting("order_by")
            )
        if count:
            report.warnings.append(
                f"{count} of {total} records lack {path!r}; their groups arrive after all others"
            )


def iter_log_chunks(
    inputs: Sequence[str | Path] | str | Path,
    options: ReadOptions | None = None,
    *,
    report: LoadReport | None = None,
    **settings: Any,
) -> Iterator[pl.DataFrame]:
    """Yield the canonical table in chunks of at most ``options.chunk_records`` raw records.

    For JSONL, dumps and tables, memory stays bounded by a chunk (``convert`` writes
    each as it comes). An artifact folder is the exception: it is read whole before its
    first chunk, because arrival order needs every file's modification time, so its part
    of the table (spans, not token lists: about 230 bytes a segment file) is held whole.
    So is the part of a large JSONL file that the helper process reads (see
    :mod:`analysis.formats.text.jsonl_parts`), until this process has read its own part.
    """
    options = ReadOptions.of(options, **settings)
    columns = options.columns
    if columns is not None:  # an extra field that is a canonical column is kept too
        columns = (*columns, *(name for name in options.extra_fields if name in CANONICAL_SCHEMA))
        options = dataclasses.replace(options, columns=columns)
    report = report if report is not None else LoadReport()
    reading = Reading(options, report, BY_NAME, read_as=read_as)
    inputs = _listed(inputs)
    kinds = KindsSeen(options.extra_fields)
    for chunk in _chunks(reading, inputs):
        kinds.check(chunk, where_from(chunk, "inputs"))
        yield _kept_columns(chunk, columns, options.extra_fields)


def iter_piece_chunks(
    path: str | Path, piece: Piece, options: ReadOptions, *, report: LoadReport
) -> Iterator[pl.DataFrame]:
    """The canonical chunks of one piece of a JSONL file (lines ``piece.first_line`` on,
    bytes ``piece.start`` to ``piece.stop``), numbered and checked as a whole read of the
    file numbers and checks them: a partitioned conversion's unit (analysis.output.partitioned)."""
    reading = Reading(options, report, BY_NAME, read_as=read_as)
    source = Source(Path(path), JSONL.name)
    report.sources.append(source)
    yield from JSONL.read_piece(source, reading, piece)
    yield from reading.flush(str(path))


def _listed(inputs: Sequence[str | Path] | str | Path) -> Sequence[str | Path]:
    """One path given alone, as a notebook user writes it, is a list of one (a string is
    a sequence too: its characters would be read as paths)."""
    return [inputs] if isinstance(inputs, (str, Path)) else inputs


def _kept_columns(
    frame: pl.DataFrame, columns: Sequence[str] | None, extra: Sequence[str]
) -> pl.DataFrame:
    """The canonical ``columns`` of a frame (all when None) and the extra fields."""
    if columns is None:
        return frame
    extra = [path for path in extra if path not in CANONICAL_SCHEMA]
    return frame.select(*[name for name in CANONICAL_SCHEMA if name in columns], *extra)


def _real_paths(paths: Iterable[Path]) -> Iterator[str]:
    """Each path resolved (links followed), each folder resolved once: a file that is not
    a link is its resolved folder and its name (one system call, where ``resolve()``
    takes one a path component: 100,000 files of a folder spent 6 s there)."""
    folders: dict[str, str] = {}
    for path in paths:
        text = os.fspath(path)
        folder, name = os.path.split(text)
        try:
            plain = not stat.S_ISLNK(os.lstat(text).st_mode) and name not in ("", ".", "..")
        except OSError:
            plain = False
        if not plain:
            yield str(path.resolve())
            continue
        real = folders.get(folder)
        if real is None:
            real = folders[folder] = os.path.realpath(folder or ".")
        yield os.path.join(real, name)


def _sources(reading: Reading, inputs: Sequence[str | Path]) -> list[Source]:
    """The sources in arrival order, with the warnings their list deserves; each format
    arranges its own (slime dumps are put in the order that is inside them)."""
    report, options = reading.report, reading.options
    sources, warnings = detect_sources(
        inputs, include_eval=options.include_eval, log_format=options.log_format
    )
    report.sources += [source for source in sources if not source.folder]  # folders once read
    report.warnings += warnings
    times = Counter(_real_paths(source.path for source in sources))
    report.warnings += [
        f"{path}: given {count} times, so its records are read {count} times; pass each input once"
        for path, count in times.items()
        if count > 1
    ]
    report.warnings += reading.versionless(s.format for s in sources)
    if options.fields != FieldMap():
        report.warnings += _fields_unused(sources)
    for fmt in FORMATS:
        if any(source.format == fmt.name for source in sources):
            sources = fmt.arrange(sources, reading)
    return sources


def _fields_unused(sources: list[Source]) -> list[str]:
    """One warning per kind of input that ``--field`` does not apply to (other systems'
    logs before the others), naming its first file."""
    unused: dict[tuple[str, str], list[Source]] = {}
    for source in sources:
        if (kind := BY_NAME[source.format].fields_unused) is not None:
            unused.setdefault(kind, []).append(source)
    kinds = sorted(unused, key=lambda kind: not BY_NAME[unused[kind][0].format].peer)
    return [
        Message(
            setting("fields")
            + f" does not apply to {what} ({unused[(what, why)][0].path.name}"
            + (", ..." if len(unused[(what, why)]) > 1 else "")
            + f"): {why}"
        )
        for what, why in kinds
    ]


def _chunks(reading: Reading, inputs: Sequence[str | Path]) -> Iterator[pl.DataFrame]:
    """Every source read by its format, in arrival order, with progress by source."""
    sources = _sources(reading, inputs)
    progress = reading.options.progress
    # in per mille of a source, as each source's own progress (Reading.within)
    for done, source in enumerate(sources, start=1):
        if progress is not None:
            progress((done - 1) * 1000, len(sources) * 1000)
        fmt = BY_NAME[source.format]
        checked = source.folder or fmt.opened_on_arrival()
        if not checked and (unreadable := unreadable_error(source.path)) is not None:
            reading.skip_or_raise(unreadable)
            continue
        yield from fmt.read(source, reading, done - 1, len(sources))
    if progress is not None:
        progress(len(sources) * 1000, len(sources) * 1000)
    yield from reading.flush("inputs")


def records_to_table(
    records: Sequence[dict[str, Any]],
    *,
    fields: FieldMap | None = None,
    extra_fields: Sequence[str] = (),
    source: str = "<records>",
    first_record: int = 1,
) -> pl.DataFrame:
    """Build the canonical table from raw record dicts already in memory (a notebook's list)."""
    fields = fields or FieldMap()
    rows = []
    for number, record in enumerate(records, start=first_record):
        row = canonical_row(
            record, fields=fields, where=f"{source}: record {number}", extra=extra_fields
        )
        row["source"] = source
        row["record"] = number
        rows.append(row)
    return rows_to_frame(rows, extra_fields, where=source)
