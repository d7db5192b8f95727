"""Write raw logs in the formats Dressage and slime produce (for sample data and tests):
JSONL, slime's ``.pt`` dumps and canonical Parquet here, Dressage's artifact trees and run
folders in :mod:`analysis.output.raw_artifacts`."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import orjson
import polars as pl

from analysis.errors import OutputError, setting
from analysis.formats.pickled.pickles import dump_pt
from analysis.output.atomic import atomic_folder, atomic_path
from analysis.output.conversion import write_canonical_chunks
from analysis.output.raw_artifacts import write_run_folder
from analysis.table.fieldmap import FieldMap

LogFormat = Literal["jsonl", "artifacts", "pt"]


def write_jsonl(records: Iterable[dict[str, Any]], path: Path) -> int:
    """Write one JSON object per line (gzip when the name ends in .gz, in any letter case,
    as the reader and ``log_format_for`` see it); return the count.

    Records are encoded here while a second thread writes (and compresses) the bytes, so
    producing records and the disk work overlap on two cores.
    """
    import gzip

    count = 0
    path = Path(path)
    with atomic_path(path) as temp, open(temp, "wb") as raw:
        # The gzip header names the final file, not the temporary one.
        compressed = path.name.lower().endswith(".gz")
        handle: Any = (
            gzip.GzipFile(filename=path.name[:-3], mode="wb", fileobj=raw, mtime=0)
            if compressed
            else raw
        )
        with _BackgroundWriter(handle) as out:
            lines: list[bytes] = []
            for record in records:
                lines.append(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
                count += 1
                if len(lines) == 256:
                    out.write(b"".join(lines))
                    lines = []
            out.write(b"".join(lines))
        if handle is not raw:
            handle.close()
    return count


class _BackgroundWriter:
    """Writes byte blocks to a file in a thread; a bounded queue keeps memory small."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.blocks: queue.Queue[bytes | None] = queue.Queue(maxsize=16)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while (block := self.blocks.get()) is not None:
            if self.error is None:
                try:
                    self.handle.write(block)
                except BaseException as error:  # re-raised in the caller's thread
                    self.error = error

    def write(self, block: bytes) -> None:
        if self.error is not None:
            raise self.error
        self.blocks.put(block)

    def __enter__(self) -> _BackgroundWriter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.blocks.put(None)
        self.thread.join()
        if self.error is not None and exc[0] is None:
            raise self.error


def write_pt_dumps(records: Iterable[dict[str, Any]], folder: Path) -> int:
    """Write slime rollout dumps, one ``rollout_<id>.pt`` per trainer step.

    The step is ``metadata.dressage_return_rollout_id``; the file-level ``rollout_id``
    carries it, as slime's own dumps do. Records of one step must be consecutive (as in
    completion order), so only one step is held in memory.
    """
    with atomic_folder(Path(folder)) as temp:
        return _write_pt_dumps(records, temp)


def _write_pt_dumps(records: Iterable[dict[str, Any]], folder: Path) -> int:
    written: set[int] = set()
    step: int | None = None
    samples: list[dict[str, Any]] = []

    def flush() -> None:
        if step is None:
            return
        with atomic_path(folder / f"rollout_{step}.pt") as temp:
            dump_pt({"rollout_id": step, "samples": samples}, temp, archive_name=f"rollout_{step}")
        written.add(step)

    count = 0
    for count, record in enumerate(records, start=1):
        record_step = record.get("metadata", {}).get("dressage_return_rollout_id")
        if record_step is None:
            raise OutputError(f"record {count} has no trainer step; .pt dumps are one per step")
        if record_step != step:
            flush()
            if record_step in written:
                raise OutputError(f"record {count}: trainer step {record_step} is not consecutive")
            step, samples = int(record_step), []
        samples.append(record)
    flush()
    return count


def write_canonical_parquet(
    records: Iterable[dict[str, Any]],
    path: Path,
    *,
    chunk_records: int = 20_000,
    fields: FieldMap | None = None,
) -> int:
    """Write records straight to the canonical Parquet layout, ``chunk_records`` rows a
    part (row group), as :func:`records_to_table` would build each part.

    Each record is mapped to its canonical row as it comes and then let go: memory holds
    one part's rows (a few small values each), never a part's raw records, whose token
    lists are most of their size.
    """
    from analysis.formats.fields import canonical_row
    from analysis.formats.frames import rows_to_frame

    fields = fields or FieldMap()
    source = str(path)

    def chunks() -> Iterator[pl.DataFrame]:
        rows: list[dict[str, Any]] = []
        for number, record in enumerate(records, start=1):
            row = canonical_row(record, fields=fields, where=f"{source}: record {number}")
            row["source"] = source
            row["record"] = number
            rows.append(row)
            if len(rows) == chunk_records:
                yield rows_to_frame(rows, (), where=source)
                rows = []
        if rows:
            yield rows_to_frame(rows, (), where=source)

    return write_canonical_chunks(chunks(), Path(path))


# Simulated records carry both token-version forms, identical by construction; reading
# the spans skips re-encoding every token.
SPANS_FIRST = FieldMap(token_versions=())


def log_format_for(path: Path, log_format: str | None) -> str:
    """The format to write: as given, else from the extension; a mismatch is refused.

    Examples
    --------
    >>> log_format_for(Path("run.parquet"), None), log_format_for(Path("dumps"), "pt")
    ('parquet', 'pt')
    """
    name = Path(path).name.lower()
    by_name = next((fmt for fmt, endings in _ENDINGS.items() if name.endswith(endings)), None)
    if log_format is None:
        if name.endswith((".pt", ".pkl", ".pickle")):
            raise OutputError(
                f"{path}: slime dumps are a folder of rollout_<step>.pt files; "
                "give a folder name and " + setting("log_format", "pt")
            )
        if by_name is None:
            raise OutputError(
                f"{path}: cannot tell the format from the name; end it in .jsonl, .jsonl.gz "
                "or .parquet, or pass " + setting("log_format", "artifacts|pt") + " for a folder"
            )
        return by_name
    if by_name is not None and by_name != log_format:
        raise OutputError(
            f"{path}: the name says {by_name} but "
            + setting("log_format")
            + f" says {log_format}; "
            "make them agree"
        )
    if log_format in ("jsonl", "parquet") and by_name is None:
        raise OutputError(f"{path}: a {log_format} file should end in {_ENDINGS[log_format][0]}")
    return log_format


_ENDINGS: dict[str, tuple[str, ...]] = {
    "jsonl": (".jsonl", ".jsonl.gz", ".ndjson"),
    "parquet": (".parquet",),
}


def write_log(records: Iterable[dict[str, Any]], path: Path, log_format: str) -> int:
    """Write records as ``jsonl`` (``.gz`` compresses), ``parquet``, ``artifacts`` or ``pt``.

    ``parquet`` reads token versions from ``version_spans`` (as the simulator writes both).
    ``artifacts`` and ``pt`` write a new folder; ``artifacts`` a Dressage run folder
    (:func:`write_run_folder`: ``traj_payload/``, ``traj_err/``, ``dressage_log.txt``).
    """
    writers: dict[str, Callable[[Iterable[dict[str, Any]], Path], int]] = {
        "jsonl": write_jsonl,
        "parquet": lambda rows, target: write_canonical_parquet(rows, target, fields=SPANS_FIRST),
        "artifacts": write_run_folder,
        "pt": write_pt_dumps,
    }
    if log_format not in writers:
        raise OutputError(f"unknown log format {log_format!r}; use one of {', '.join(writers)}")
    return writers[log_format](records, Path(path))
