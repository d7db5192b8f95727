"""Where results and messages go: data to standard output, progress and warnings to stderr."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer

import analysis
from analysis import counted
from cli.flags import flagged, flagged_dict, one_line


@contextlib.contextmanager
def progress_bar(description: str, *, quiet: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A transient rich progress bar on stderr, or nothing when quiet or not a terminal."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=None)
        yield lambda done, total: progress.update(task, completed=done, total=total)


@contextlib.contextmanager
def results_out() -> Iterator[None]:
    """Results printed to standard output. One that cannot take them (a full disk) is an
    output error, exit 8, not an internal error; a reader that has gone (``| head``) ends
    the command quietly with 141 (see :func:`cli.errors.stdout_gone`)."""
    if sys.stdout is None:  # started with it closed (`>&-`)
        raise analysis.OutputError(
            "standard output is closed: the results cannot be printed; "
            "send them to a terminal, a pipe or a file"
        )
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        raise  # cli.errors ends the command quietly
    except OSError as exc:
        stdout_to_devnull()  # what it holds unwritten must not fail again at exit
        raise analysis.OutputError(
            f"standard output: cannot write the results ({exc.strerror}); "
            "write them where there is room"
        ) from None


def stdout_to_devnull() -> None:
    """Point standard output at /dev/null, so that Python's flush at exit cannot fail."""
    with contextlib.suppress(OSError, ValueError):  # (no file descriptor: captured)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def reader_gone(console: Any) -> None:
    """rich's own handling exits with 1, which this tool's exit codes call an internal
    error: raise the error instead, to end the command with 141."""
    raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


STDOUT = "-"
"""An output named ``-``: the data goes to standard output (``-o -``, ``--decisions -``)."""


def is_stdout(path: Any) -> bool:
    """Whether an output option names standard output (``-``)."""
    return path is not None and str(path) == STDOUT


def print_csv(frame: Any) -> None:
    """A table as CSV on standard output (an output named ``-``)."""
    with results_out():
        typer.echo(frame.write_csv(), nl=False)


def print_jsonl(records: Any) -> int:
    """Records as JSONL on standard output (an output named ``-``); how many."""
    import orjson

    count = 0
    with results_out():
        out = sys.stdout.buffer
        for record in records:
            out.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
            count += 1
        out.flush()
    return count


def stdout_once(**outputs: Any) -> None:
    """Refuse two outputs that both go to standard output (``--json``, an output named
    ``-``): their data would be mixed in one stream."""
    named = [name for name, value in outputs.items() if value is True or is_stdout(value)]
    if len(named) > 1:
        raise typer.BadParameter(
            "both write to standard output; send one of them to a file", param_hint=", ".join(named)
        )


def refuse_existing(*outputs: Any, force: bool) -> None:
    """One rule for every output, file or folder: one that exists is refused unless
    ``--force`` (an empty folder is a place for a new one); said before any work. An
    output named ``-`` is standard output."""
    for output in outputs:
        if output is None or is_stdout(output) or force:
            continue
        path = Path(output)
        if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
            continue
        if path.exists() or path.is_symlink():
            kind = "a folder" if path.is_dir() else "a file"
            raise analysis.OutputError(
                f"{path}: already exists ({kind}); pass --force to replace it, or name another"
            )


def replacing(output: Any, *, force: bool) -> Any:
    """Around the write of a folder output: with ``--force``, the folder that exists moved
    aside, removed once the new one is written, put back if the write fails."""
    if force and output is not None and not is_stdout(output) and Path(output).is_dir():
        return analysis.set_aside(Path(output))
    return contextlib.nullcontext()


def stderr_console() -> Any:
    """A console on stderr (what would go to stdout, when the data takes stdout)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=False)


def stdout_console() -> Any:
    from rich.console import Console

    # Piped or captured output is not cut to 80 columns: tables stay whole in files.
    width = None if sys.stdout.isatty() else 120
    return Console(file=sys.stdout, highlight=False, soft_wrap=False, width=width)


def print_json(result: dict[str, Any]) -> None:
    """One JSON value on standard output, its notes and warnings said as flags."""
    typer.echo(json_text(flagged_dict(result)))


def json_text(value: Any) -> str:
    """``value`` as strict JSON: a float that is not finite (a mean over NaN rewards, a
    drift of infinite log-probs) is ``null``, as JSON has no NaN or Infinity (``jq`` and
    strict parsers refuse them; issue 34)."""
    return json.dumps(_finite(value), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def say_note(text: str) -> None:
    """A library note on stderr, its settings said as flags."""
    typer.echo(f"note: {flagged(text)}", err=True)


def report_dict(report: analysis.LoadReport) -> dict[str, Any]:
    """The load report's skips as extra JSON keys (only when something was skipped)."""
    if not report.skipped:
        return {}
    return {"skipped": {"by_reason": dict(report.skipped), "first": report.skipped_where}}


def warn(report: analysis.LoadReport, *, verbose: bool = False) -> None:
    """Load warnings and skipped records, on stderr; the detail behind a warning said in
    short (:class:`analysis.Explained`) with ``verbose``, else a pointer to it."""
    for warning in report.warnings:
        say_warning(warning, verbose=verbose)
    skipped = sum(report.skipped.values())
    if skipped:
        reasons = ", ".join(
            counted(count, *reason.nouns) for reason, count in report.skipped.items()
        )
        typer.echo(f"warning: skipped {reasons}; the first:", err=True)
        for where in report.skipped_where:
            typer.echo(f"  {one_line(flagged(where))}", err=True)


def say_warning(warning: str, *, verbose: bool = False) -> None:
    """One warning on stderr, in one line; one said in short gets its detail on a second
    line with ``verbose``, else says where the detail is."""
    detail = analysis.detail_of(warning)
    more = " (--verbose says more)" if detail and not verbose else ""
    typer.echo(f"warning: {one_line(flagged(warning))}{more}", err=True)
    if detail and verbose:
        typer.echo(f"  {one_line(flagged(detail))}", err=True)


def show_library_warnings() -> None:
    """What the library says as a Python warning while it writes (a temporary left by a
    killed write, removed: :class:`analysis.output.atomic.LeftoverRemovedWarning`), as a
    ``warning:`` line on stderr like every other; other warnings as Python shows them."""
    previous = warnings.showwarning
    if getattr(previous, "dressage_replay", False):
        return  # installed already (the app is called again in one process by tests)

    def show(
        message: Warning | str, category: type[Warning], filename: str, lineno: int,
        file: Any = None, line: str | None = None,
    ) -> None:  # fmt: skip
        if category.__name__ == "LeftoverRemovedWarning":
            typer.echo(f"warning: {one_line(flagged(str(message)))}", err=True)
        else:
            previous(message, category, filename, lineno, file, line)

    show.dressage_replay = True  # type: ignore[attr-defined]
    warnings.showwarning = show
