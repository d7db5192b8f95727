"""One input as a load reads it: a file, or a whole artifact folder, and its format's name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from analysis.errors import InputNotFoundError
from analysis.table.limits import check_regular, is_pipe


@dataclass(frozen=True)
class Source:
    """One input file and the format it is read as; or a whole artifact folder (``folder``).

    ``format`` is the name of a format of :data:`analysis.formats.registry.FORMATS` (the
    ``--format`` value), so that a source pickles and prints as plain data."""

    path: Path
    format: str
    folder: bool = False
    files: int = 1
    """How many files it stands for (an artifact folder's segment files, once read)."""


def unreadable_error(path: Path) -> InputNotFoundError | None:
    """The error of an input file that cannot be opened (no permission, say), if any: one
    line and exit 3, where reading it would fail in a way of the format's own; a device
    (a link to /dev/zero: it never ends) is refused too."""
    try:
        check_regular(path)
        if is_pipe(path):  # opened only to be read: a probe would lose its bytes
            return None
        with open(path, "rb"):
            return None
    except InputNotFoundError as error:
        return error
    except FileNotFoundError:
        return InputNotFoundError(f"{path}: no such file; check the path")
    except OSError as exc:
        return InputNotFoundError(f"{path}: cannot read ({exc.strerror}); check its permissions")
