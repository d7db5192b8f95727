"""Writing outputs safely: a temporary file beside the target, renamed when complete."""

from __future__ import annotations

import contextlib
import errno
import functools
import glob
import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from analysis.errors import LogFormatError, OutputError
from analysis.formats.canonical.reader import SOURCE_FORMATS_KEY
from analysis.formats.load import iter_log_chunks, report_missing_extra_fields
from analysis.formats.load_report import LoadReport
from analysis.table.options import ReadOptions
from analysis.table.schema import CANONICAL_SCHEMA

if TYPE_CHECKING:
    from analysis.engine import LoopReplay, PreparedLog, ReplayResult


def _matched(inputs: Iterable[Path]) -> Iterator[Path]:
    """Each input, and for a glob pattern the tool expands itself (quoted on the command
    line: ``'g/*.jsonl'``), every file it matches."""
    for source in inputs:
        text = str(source)
        if any(c in text for c in "*?[") and not Path(source).exists():
            yield from map(Path, glob.glob(text))
        yield Path(source)


def refuse_overwriting_inputs(output: Path, inputs: Iterable[Path]) -> None:
    """Raise OutputError when ``output`` is (or lies inside) one of ``inputs``, or one of
    the files a glob pattern among them matches."""
    target = output.resolve()
    for source in _matched(inputs):
        resolved = Path(source).resolve()
        if target == resolved or resolved in target.parents:
            raise OutputError(
                f"{output}: refusing to write over the input {source}; choose another output path"
            )


FRAME_FORMATS = {
    ".csv": "write_csv",
    ".parquet": "write_parquet",
    ".arrow": "write_ipc",
    ".ipc": "write_ipc",
    ".feather": "write_ipc",
    ".json": "write_json",
    ".jsonl": "write_ndjson",
    ".ndjson": "write_ndjson",
}
"""Table outputs (decisions, sweep rows) by extension: the polars writer of each."""


CANONICAL_FORMATS = (".parquet", ".arrow", ".ipc", ".feather")
"""What the canonical table (``convert``) is written as."""


def check_output(
    path: Path, extensions: Iterable[str], *, what: str = "output", inputs: Iterable[Path] = ()
) -> None:
    """Refuse, before any work, an output that could not be written: an unknown extension,
    a folder that is not there or is a file, a path that is a folder, or one of the inputs
    (a multi-GB log must not be read first to learn of a typo in the output's name)."""
    path = Path(path)
    suffix = path.suffix.lower()
    known = list(extensions)
    if path.is_dir():
        raise OutputError(f"{path}: is a folder; give a file name ending in {known[0]}")
    if suffix not in known:
        raise OutputError(
            f"{path}: unknown {what} extension {suffix or '(none)'}; use one of {', '.join(known)}"
        )
    _check_folder(path)
    refuse_overwriting_inputs(path, inputs)


def _check_folder(path: Path) -> Path:
    """The folder ``path`` is to be written in, which must exist."""
    directory = path.parent
    if not directory.is_dir():
        problem = "is a file, not a folder" if directory.exists() else "does not exist"
        raise OutputError(f"{path}: {directory} {problem}; give a path in an existing folder")
    return directory


# ------------------------------------------------------------- temporaries beside outputs

NO_TMPFILE_ENV = "DRESSAGE_REPLAY_NO_TMPFILE"
"""When set (not empty), :func:`atomic_path` writes a named temporary even where the
system offers anonymous ones (to test the fallback)."""
use_tmpfile = True
"""Whether :func:`atomic_path` may write an anonymous ``O_TMPFILE`` (tests turn it off)."""


class LeftoverRemovedWarning(UserWarning):
    """A temporary left beside an output by a write that was killed, removed by the next
    write of that output (the command line prints it as a ``warning:`` line)."""


@functools.cache
def _here() -> str:
    """8 hex digits that tell this machine, boot and process namespace apart: a pid means
    something only there. A container sharing the folder, or another host on shared
    storage, sees a live writer's pid as gone; its temporaries carry another tag, so they
    are never taken for leftovers here."""
    parts = [socket.gethostname()]
    with contextlib.suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    with contextlib.suppress(OSError):
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:8]


def _temp_name(path: Path) -> str:
    """A temporary's name beside ``path``: ``.NAME.<pid>-<here>-XXXXXXXX.tmp``, the pid of
    the process that writes it and where that pid means something (:func:`_here`): a
    later write from the same place removes it once that process is gone."""
    return f".{path.name}.{os.getpid()}-{_here()}-{secrets.token_hex(4)}.tmp"


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs (or may: one of another user's, or past the range;
    any, where signal 0 does not ask, off POSIX)."""
    if pid == os.getpid() or os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def _ours(name: str) -> bool:
    """Whether ``name`` is a temporary of this process (a folder being written)."""
    found = re.fullmatch(r"\..+\.([0-9]{1,10})-([0-9a-f]{8})-[0-9a-f]{8}\.tmp", name)
    return found is not None and int(found.group(1)) == os.getpid() and found.group(2) == _here()


def remove_leftovers(path: Path) -> list[Path]:
    """Remove the temporaries of ``path`` (``.NAME.<pid>-<here>-XXXXXXXX.tmp``, files or
    folders) written on this machine and in this process namespace (:func:`_here`) whose
    writing process is gone: a write killed (``kill -9``, the OOM killer) left them.
    Nothing else is touched, not even another output's temporaries, nor those written
    from elsewhere (whose pids mean nothing here); each removal is said as a
    :class:`LeftoverRemovedWarning`."""
    path = Path(path)
    removed: list[Path] = []
    if _ours(path.parent.name):
        return removed  # a file of a folder this process is writing: nothing left there
    pattern = re.compile(rf"\.{re.escape(path.name)}\.([0-9]{{1,10}})-{_here()}-[0-9a-f]{{8}}\.tmp")
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed  # the write says why it cannot write there
    for entry in entries:
        found = pattern.fullmatch(entry.name)
        if found is None or _alive(int(found.group(1))):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            continue  # gone already (another write removed it), or not ours to remove
        removed.append(Path(entry.path))
    if removed:
        warnings.warn(
            f"{path}: removed {', '.join(item.name for item in removed)}, left half-written "
            "beside it by an earlier write that was killed (its process is gone)",
            LeftoverRemovedWarning,
            stacklevel=3,
        )
    return removed


def _anonymous_file(directory: Path) -> int | None:
    """A descriptor of a new file in ``directory`` that has no name (Linux's O_TMPFILE):
    it vanishes with the process, whatever ends it. None where the system or the folder's
    filesystem has none (the caller then writes a named temporary)."""
    flag = getattr(os, "O_TMPFILE", 0)
    if not (flag and use_tmpfile and os.path.isdir("/proc/self/fd")):
        return None
    if os.environ.get(NO_TMPFILE_ENV):
        return None
    try:
        # 0o666 with the umask applied: the permissions a plain open() gives.
        return os.open(directory, flag | os.O_RDWR, 0o666)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return None
        raise


def _publish(handle: int, path: Path) -> None:
    """Give the anonymous file ``handle`` a temporary name beside ``path``, then rename it
    over ``path`` (a name of its own first: a link cannot replace a file)."""
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            name = _temp_name(path)
            try:
                # A target folder makes this linkat(..., AT_SYMLINK_FOLLOW): plain link()
                # would link /proc's magic link itself, not the file it stands for.
                os.link(f"/proc/self/fd/{handle}", name, dst_dir_fd=folder, follow_symlinks=True)
                break
            except FileExistsError:
                continue
        try:
            os.replace(name, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder)
            raise
    finally:
        os.close(folder)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only on success.

    On Linux the temporary is an anonymous file (``O_TMPFILE``) written through its
    ``/proc/self/fd/N`` path, so that nothing is left if the process is killed; elsewhere,
    or where the folder's filesystem has none, a file ``.NAME.<pid>-<here>-XXXXXXXX.tmp``, which
    the next write of ``path`` removes if a kill left it (:func:`remove_leftovers`).
    """
    path = Path(path)
    directory = _check_folder(path)
    remove_leftovers(path)
    try:
        handle = _anonymous_file(directory)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write there ({exc.strerror})") from exc
    if handle is None:
        with _named_temporary(path, directory) as temp:
            yield temp
        return
    try:
        yield Path(f"/proc/{os.getpid()}/fd/{handle}")
        _publish(handle, path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror})") from exc
    finally:
        os.close(handle)


def _make_named(path: Path, directory: Path, make: Callable[[Path], None]) -> Path:
    """A new temporary beside ``path``, made by ``make`` (a file or a folder)."""
    while True:
        temp = directory / _temp_name(path)
        try:
            make(temp)
            return temp
        except FileExistsError:
            continue
        except OSError as exc:
            raise OutputError(
                f"{path}: cannot write there ({exc.strerror}); choose a writable folder"
            ) from exc


def _new_file(temp: Path) -> None:
    # 0o666 with the umask applied: the permissions a plain open() gives.
    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


@contextlib.contextmanager
def _named_temporary(path: Path, directory: Path) -> Iterator[Path]:
    temp = _make_named(path, directory, _new_file)
    try:
        yield temp
        os.replace(temp, path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror})") from exc
    finally:
        with _no_interrupts():
            temp.unlink(missing_ok=True)


def temporary_folder(path: Path) -> Path:
    """A new folder ``.NAME.<pid>-<here>-XXXXXXXX.tmp`` beside ``path``, to be renamed to it when
    whole (first removing the ones killed writes of ``path`` left: :func:`remove_leftovers`);
    its permissions are a plain mkdir()'s."""
    path = Path(path)
    remove_leftovers(path)
    return _make_named(path, _check_folder(path), os.mkdir)


@contextlib.contextmanager
def atomic_folder(path: Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; rename it to ``path`` only on success.

    ``path`` must not exist, or be an empty folder: a run is never mixed into another's
    files, and an interrupted write leaves nothing behind (a kill leaves the folder
    ``.NAME.<pid>-<here>-XXXXXXXX.tmp``, which the next write of ``path`` removes).
    """
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        kind = "a folder that is not empty" if path.is_dir() else "a file"
        raise OutputError(f"{path}: already exists and is {kind}; choose a new folder")
    temp = temporary_folder(path)
    try:
        # Held open, the folder keeps its inode: one removed and made again differs.
        held = os.open(temp, os.O_RDONLY)
        try:
            yield temp
            _check_same_folder(path, temp, os.fstat(held))
        finally:
            os.close(held)
        if path.exists():
            path.rmdir()
        os.replace(temp, path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror})") from exc
    finally:
        with _no_interrupts():  # a second Ctrl-C would leave the folder half removed
            if temp.exists():
                shutil.rmtree(temp, ignore_errors=True)


@contextlib.contextmanager
def _no_interrupts() -> Iterator[None]:
    """Ctrl-C ignored for the clean-up in the block (the main thread only can set it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _check_same_folder(path: Path, temp: Path, made: os.stat_result) -> None:
    """Refuse to publish a temporary folder that was removed while it was written (and
    perhaps made again, partly, by a writer's ``mkdir(parents=True)``)."""
    try:
        now = temp.stat()
    except OSError:
        now = None
    if now is None or made.st_nlink == 0 or (now.st_ino, now.st_dev) != (made.st_ino, made.st_dev):
        raise OutputError(
            f"{path}: its temporary folder {temp.name} was removed while it was being "
            "written, so what it holds is not whole; nothing was written, run again"
        )


def write_frame(frame: pl.DataFrame, path: Path) -> None:
    """Write a frame as CSV, Parquet, Arrow IPC or JSON, chosen by the path's extension."""
    path = Path(path)
    check_output(path, FRAME_FORMATS)
    with atomic_path(path) as temp:
        getattr(frame, FRAME_FORMATS[path.suffix.lower()])(temp)


DECISION_COLUMNS = ("group_id", "decision", "stage", "batch", "version_index", "version_gap")


def write_decisions(result: ReplayResult, path: Path, *, inputs: Iterable[Path] = ()) -> None:
    """Write one row per group (CSV or Parquet by extension), the decision columns first."""
    refuse_overwriting_inputs(Path(path), inputs)
    frame = result.decisions
    write_frame(frame.select(*DECISION_COLUMNS, pl.exclude(DECISION_COLUMNS)), path)


def write_trajectories(
    prepared: PreparedLog, result: ReplayResult, path: Path, *, inputs: Iterable[Path] = ()
) -> None:
    """Write one row per trajectory of a replayed log, in the columns a run folder's replay
    writes too (:data:`analysis.engine.run_loop.replay.TRAJECTORY_TABLE_COLUMNS`)."""
    from analysis.engine import TRAJECTORY_TABLE_COLUMNS, trajectory_outcomes

    outcomes = trajectory_outcomes(prepared, result)
    write_frame_to(outcomes.select(TRAJECTORY_TABLE_COLUMNS), path, inputs=inputs)


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


def write_frame_to(frame: pl.DataFrame, path: Path, *, inputs: Iterable[Path] = ()) -> None:
    """Write a result frame by extension, refusing to overwrite an input."""
    refuse_overwriting_inputs(Path(path), inputs)
    write_frame(frame, path)


def write_run_tables(
    result: LoopReplay,
    *,
    decisions: Path | None = None,
    trajectories: Path | None = None,
    inputs: Iterable[Path] = (),
) -> list[Path]:
    """Write ``replay RUN``'s tables: one row per attempt to ``decisions``, one per
    trajectory to ``trajectories`` (format by extension); the paths written."""
    written = []
    for frame, path in (
        (result.decision_table, decisions),
        (result.trajectory_table, trajectories),
    ):
        if path is not None:
            write_frame_to(frame(), path, inputs=inputs)
            written.append(path)
    return written
