"""Convert a run, or many runs, to a partitioned canonical dataset: a folder of Parquet
parts that every command reads as one log, written by the local cores or a Ray cluster.

The work is cut into units that read independently to the same rows as one load of
every input would give: a JSONL, Parquet or Arrow file is a unit of its own; a folder
whose order is decided across its files (slime dumps, put in rollout order; a Dressage
artifact tree, in completion order) is one unit. Each unit is read by a worker (a local
process, or a Ray task) and written as ``part-<unit>.parquet``; the parts, in name order,
are the table a local ``convert`` writes. Parts are written into a hidden folder beside
the output, renamed into place once every unit is done, so a failed or interrupted
conversion leaves nothing at the output path.

With ``on_bad_record="fail"``, the error raised is that of the first unit (in input
order) that failed, as one process reading the inputs in order would raise it.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from analysis.errors import ConfigError, OutputError, ReplayError, SkipReason, setting
from analysis.formats.text.jsonl_parts import Piece, cut
from analysis.output.checks import check_folder
from analysis.table.options import ReadOptions


def part_name(index: int, count: int) -> str:
    """``part-00007.parquet``: at least five digits, as many as the last part needs, so
    that name order is unit order."""
    return f"part-{index:0{max(5, len(str(count - 1)))}d}.parquet"


PIECE_BYTES = 256 << 20
"""An uncompressed JSONL file larger than this is cut into pieces of about this size
(at line ends), each a unit of its own: one large file spreads over the workers too."""


@dataclass(frozen=True)
class Unit:
    """Inputs read together into one part (``index`` orders the parts); or one piece of
    a JSONL file (``piece``: its bytes and first line)."""

    index: int
    inputs: tuple[str, ...]
    piece: Piece | None = None
    count: int = 1
    """How many units the dataset has (its part names are as wide as the largest)."""


class UnitFailed(ReplayError):
    """A unit that failed in a way no reader foresaw (a bug), with the worker's traceback."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (UnitFailed, (self.message, self.detail))


@dataclass
class UnitResult:
    """What a worker reports of one unit: rows written, or the error that stopped it."""

    index: int
    rows: int = 0
    skipped: dict[SkipReason, int] = field(default_factory=dict)
    skipped_where: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    error: ReplayError | None = None


@dataclass
class PartitionedReport:
    """A partitioned conversion: parts, rows, skipped records and warnings, in unit order."""

    parts: int
    rows: int
    skipped: dict[SkipReason, int]
    skipped_where: list[str]
    warnings: list[str]
    formats: list[str]
    workers: str
    """Where the units ran: ``local (N processes)`` or ``ray (ADDRESS)``."""


def plan_units(
    inputs: Sequence[str | Path], *, include_eval: bool = False, piece_bytes: int = PIECE_BYTES
) -> list[Unit]:
    """The units of ``inputs``, in input order (see the module docstring); a plain JSONL
    file above ``piece_bytes`` is cut into pieces of about that size."""
    from analysis.formats.discover import detect_sources
    from analysis.formats.registry import BY_NAME

    units: list[Unit] = []
    for raw in inputs:
        sources, _ = detect_sources([raw], include_eval=include_eval)  # warned by the units
        if not sources or not all(BY_NAME[s.format].reads_alone for s in sources):
            units.append(Unit(len(units), (str(raw),)))
            continue
        for source in sources:
            in_pieces = BY_NAME[source.format].cut_in_pieces
            for piece in _pieces(source.path, piece_bytes) if in_pieces else [None]:
                units.append(Unit(len(units), (str(source.path),), piece))
    return [dataclasses.replace(unit, count=len(units)) for unit in units]


def _pieces(path: Path, piece_bytes: int) -> list[Piece | None]:
    """A plain JSONL file's pieces (one ``None``, the whole file, when it is small or
    compressed)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as probe:
            compressed = probe.read(2) == b"\x1f\x8b"
    except OSError:
        return [None]  # said when the unit reads it
    if compressed or size <= piece_bytes or not path.is_file():
        return [None]
    pieces: list[Piece | None] = list(cut(path, size, count=-(-size // piece_bytes)))
    return pieces


def convert_unit(unit: Unit, options: ReadOptions, folder: str) -> UnitResult:
    """Read one unit and write its part into ``folder`` (run by a worker)."""
    from analysis.formats.load import iter_log_chunks, iter_piece_chunks
    from analysis.formats.load_report import LoadReport
    from analysis.output.conversion import write_canonical_chunks

    report = LoadReport()
    result = UnitResult(unit.index)
    target = Path(folder) / part_name(unit.index, unit.count)
    try:
        if unit.piece is None:
            chunks = iter_log_chunks(list(unit.inputs), options, report=report)
        else:
            chunks = iter_piece_chunks(unit.inputs[0], unit.piece, options, report=report)
        result.rows = write_canonical_chunks(
            chunks, target, inputs=[], formats=lambda: report.formats
        )
    except ReplayError as error:
        result.error = error
    except Exception as error:  # a bug: its type, message and where, for the driver to say
        import traceback

        result.error = UnitFailed(
            f"internal error converting {', '.join(unit.inputs)} "
            f"({type(error).__name__}: {error}); rerun with --traceback and report it",
            detail="".join(traceback.format_exception(error)),
        )
    result.skipped = dict(report.skipped)
    result.skipped_where = list(report.skipped_where)
    result.warnings = list(report.warnings)
    result.formats = report.formats
    return result


Runner = Callable[[list[Unit], ReadOptions, str], list[UnitResult]]

WORKER_ENVIRONMENT = {**os.environ, "DRESSAGE_REPLAY_HELPERS": "0"}
"""A worker reads its unit on its own core: the units are what spreads the work, so a
worker starts no second-core helper of its own."""


def run_local(workers: int | None = None) -> Runner:
    """Units on this machine's cores: ``workers`` worker processes (all cores when None),
    each a fresh interpreter (``python -c ...worker_main()``) that takes one unit at
    a time from this process, so a slow unit does not hold others back. No fork (polars'
    threads do not survive one) and no multiprocessing (whose spawn re-runs a caller's
    script that lacks a ``__main__`` guard). One unit, or one worker, is read here."""
    count = (os.cpu_count() or 1) if workers is None else workers
    if count < 1:
        raise ConfigError(
            "require " + setting("workers", count) + " to be 1 or more (the processes that write "
            "the parts)"
        )
    return _LocalRunner(count)


class _LocalRunner:
    """See :func:`run_local`; ``used`` says what the last run ran on."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.used = f"local, up to {count} processes"

    def __call__(self, units: list[Unit], options: ReadOptions, folder: str) -> list[UnitResult]:
        processes = min(self.count, len(units))
        if processes <= 1:
            self.used = "in this process"
            return [convert_unit(unit, options, folder) for unit in units]
        self.used = f"{processes} local processes"
        return _Dispatch(units, options, folder).run(processes)


class _Dispatch:
    """Units handed to worker processes one at a time, in order, by one thread each."""

    def __init__(self, units: list[Unit], options: ReadOptions, folder: str) -> None:
        self.queue = list(reversed(units))
        self.options, self.folder = options, folder
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.results: list[UnitResult] = []
        self.failures: list[BaseException] = []
        self.started: list[_Worker] = []

    def next_unit(self) -> Unit | None:
        with self.lock:
            going = self.queue and not self.failures and not self.stop.is_set()
            return self.queue.pop() if going else None

    def work(self) -> None:
        try:
            with _Worker() as worker:
                with self.lock:
                    self.started.append(worker)
                while (unit := self.next_unit()) is not None:
                    result = worker.convert(unit, self.options, self.folder)
                    with self.lock:
                        self.results.append(result)
                    if result.error is not None:  # the units before it are all out
                        self.stop.set()
        except BaseException as error:  # said once every thread is done
            with self.lock:
                self.failures.append(error)

    def run(self, processes: int) -> list[UnitResult]:
        threads = [threading.Thread(target=self.work) for _ in range(processes)]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():  # in steps, so that Ctrl-C is seen at once
                    thread.join(0.2)
        except BaseException:  # Ctrl-C or SIGTERM: no unit more, the workers ended now
            self.stop.set()
            with self.lock:
                for worker in self.started:
                    worker.kill()
            for thread in threads:
                thread.join()
            raise
        if self.failures:
            raise self.failures[0]
        return self.results


class _Worker:
    """One worker process: a unit in (a length, then a pickle) on its stdin, its result
    out the same way on its stdout. Only this package's own objects pass, between two
    processes of the same user: nothing from a log is unpickled here."""

    def __enter__(self) -> _Worker:
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from analysis.output.partitioned import worker_main; worker_main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=WORKER_ENVIRONMENT,
            # its own session: a Ctrl-C at the terminal reaches the driver only, which
            # ends the workers itself (no traceback of theirs while they start)
            start_new_session=True,
        )  # fmt: skip
        return self

    def convert(self, unit: Unit, options: ReadOptions, folder: str) -> UnitResult:
        assert self.process.stdin is not None and self.process.stdout is not None
        _send(self.process.stdin, (unit, options, folder))
        result = _receive(self.process.stdout)
        if not isinstance(result, UnitResult):
            code = self.process.wait()
            how = (
                f"was killed by signal {-code}" + (" (out of memory?)" if code == -9 else "")
                if code < 0
                else f"ended early (exit {code})"
            )
            raise UnitFailed(f"converting {', '.join(unit.inputs)}: a worker process {how}")
        return result

    def kill(self) -> None:
        self.process.kill()

    def __exit__(self, *exc: object) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _send(stream: IO[bytes], item: object) -> None:
    data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> object:
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack("<Q", head)
    return pickle.loads(stream.read(size))  # our own worker's reply


def worker_main() -> None:
    """The worker process's loop: units until its stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides; it kills us if it must
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while (job := _receive(source)) is not None:
        unit, options, folder = job  # type: ignore[misc]
        _send(sink, convert_unit(unit, options, folder))  # type: ignore[has-type]


def convert_partitioned(
    inputs: Sequence[str | Path],
    output: Path,
    options: ReadOptions | None = None,
    *,
    runner: Runner | None = None,
    progress: Callable[[int, int], None] | None = None,
    piece_bytes: int = PIECE_BYTES,
) -> PartitionedReport:
    """Convert ``inputs`` into the folder ``output`` of Parquet parts (module docstring).

    ``runner`` runs the units: :func:`run_local` (the default) or
    :func:`analysis.output.ray_runner.run_ray`."""
    options = dataclasses.replace(options or ReadOptions(), progress=None)
    runner = runner or run_local()
    output = Path(output)
    _check_output(output, inputs)
    units = plan_units(inputs, include_eval=options.include_eval, piece_bytes=piece_bytes)
    from analysis.output.atomic import temporary_folder

    # Named with this process's pid: a kill -9 leaves it, and the next convert removes it.
    staging = temporary_folder(output)
    try:
        if progress is not None:
            progress(0, len(units))
        results = sorted(runner(units, options, str(staging)), key=lambda r: r.index)
        if progress is not None:
            progress(len(units), len(units))
        failed = next((r.error for r in results if r.error is not None), None)
        if failed is not None:
            raise failed
        try:
            staging.rename(output)
        except OSError as error:
            raise OutputError(
                f"{output}: cannot put the dataset there ({error.strerror}); choose another "
                "name or folder"
            ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return _report(results, str(getattr(runner, "used", getattr(runner, "__name__", "local"))))


def _check_output(output: Path, inputs: Sequence[str | Path]) -> None:
    if output.exists():
        raise OutputError(
            f"{output}: already exists; a partitioned dataset is written as a new folder: "
            "remove it or name another"
        )
    if not output.parent.is_dir():
        raise OutputError(f"{output}: its folder {output.parent} does not exist; create it first")
    check_folder(output)  # and takes a new entry
    resolved = output.resolve()
    for raw in inputs:
        given = Path(raw).resolve()
        if resolved == given or given in resolved.parents:
            raise OutputError(f"{output}: inside the input {raw}; write the dataset somewhere else")


def _report(results: list[UnitResult], workers: str) -> PartitionedReport:
    skipped: dict[SkipReason, int] = {}
    where: list[str] = []
    warnings: list[str] = []
    formats: set[str] = set()
    for result in results:
        for reason, count in result.skipped.items():
            skipped[reason] = skipped.get(reason, 0) + count
        where += result.skipped_where
        warnings += [warning for warning in result.warnings if warning not in warnings]
        formats.update(result.formats)
    return PartitionedReport(
        parts=len(results), rows=sum(r.rows for r in results), skipped=skipped,
        skipped_where=where[:5], warnings=warnings, formats=sorted(formats), workers=workers,
    )  # fmt: skip
