"""Checks before an output is written: a known extension, an existing folder, and never one
of the inputs (a multi-GB log must not be read first to learn of a typo in the output's name)."""

from __future__ import annotations

import glob
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from analysis.errors import OutputError


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
    check_folder(path)
    refuse_overwriting_inputs(path, inputs)


def check_folder(path: Path) -> Path:
    """The folder ``path`` is to be written in, which must exist and take a new file (a
    read-only folder was found only once the work was done: issue 34)."""
    directory = path.parent
    try:
        is_folder = stat.S_ISDIR(os.stat(directory).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        is_folder = False
    except OSError as exc:
        raise _unwritable(path, exc) from exc
    if not is_folder:
        problem = "is a file, not a folder" if directory.exists() else "does not exist"
        raise OutputError(f"{path}: {directory} {problem}; give a path in an existing folder")
    try:  # an anonymous file where the system has them (O_TMPFILE): nothing is left
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise _unwritable(path, exc) from exc
    return directory


def _unwritable(path: Path, exc: OSError) -> OutputError:
    return OutputError(f"{path}: cannot write there ({exc.strerror}); choose a writable folder")
