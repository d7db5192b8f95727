"""The one place where what stopped the program becomes a line on stderr and an exit code.

A command's error ends in :class:`ReportingCommand` (the class of every command, so also
under :class:`typer.testing.CliRunner`); what happens outside a command's body (typer's
usage errors, its help, an interrupt while options are parsed) ends in
:func:`ended_outside_command`.
Exit codes are the library's one table, :class:`analysis.ExitCode`.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

import typer
from typer.core import TyperCommand

from analysis import ExitCode, ReplayError, SettingSyntaxError
from cli.flags import FLAGS, one_line, say_setting
from cli.output import stdout_to_devnull
from cli.signals import Terminated, was_terminated


def usage_error(error: SettingSyntaxError) -> typer.BadParameter:
    """A setting written in a shape that does not parse, as a usage error (exit 2) of the
    flag the message names: ``Invalid value for '--field': expected MEANING=PATH ...``."""
    message = error.render(say_setting)
    hint = next((FLAGS.get(name, name) for name, _ in error.settings), None)
    if hint is not None:
        message = message.removeprefix(f"{hint}: ")
    return typer.BadParameter(message, param_hint=hint)


def _is_usage_error(error: BaseException) -> bool:
    """typer's usage errors carry a message and an exit code; told apart by shape because
    typer keeps their classes private."""
    return callable(getattr(error, "format_message", None)) and isinstance(
        getattr(error, "exit_code", None), int
    )


class ReportingCommand(TyperCommand):
    """The class of every command: an error its body raises ends here as one line and an
    exit code (its options are parsed before: their errors are typer's)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except BaseException as error:
            if _is_usage_error(error):  # typer.BadParameter of a value the body parses
                raise
            show = bool(ctx.params.get("traceback_"))
            raise typer.Exit(command_failed(error, show_traceback=show)) from None


def _interrupt_inside(error: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or SIGTERM) an error was raised from, if any: one that lands in a class
    body being made (as matplotlib is imported) comes out as a RuntimeError of Python's."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def command_failed(error: BaseException, *, show_traceback: bool) -> int:
    """Say what stopped a command (call it while handling ``error``); the exit code."""
    if (interrupt := _interrupt_inside(error)) is not None:
        return interrupted(interrupt)
    if isinstance(error, BrokenPipeError):
        return stdout_gone()
    if show_traceback:
        traceback.print_exc()
    if isinstance(error, ReplayError):
        typer.echo(f"Error: {one_line(error.render(say_setting))}", err=True)
        return error.exit_code
    if isinstance(error, MemoryError):
        typer.echo(
            "Error: out of memory: this work needs more memory than the process could get; "
            "give it less at a time (fewer inputs, fewer settings with -k and -m, "
            "--limit values no higher than needed) or run it where more memory is free",
            err=True,
        )
        return ExitCode.OUT_OF_MEMORY
    # also a panic inside a native library
    typer.echo(
        f"Error: internal error ({type(error).__name__}: {one_line(str(error))}); "
        "rerun with --traceback and report it",
        err=True,
    )
    return ExitCode.INTERNAL


def ended_outside_command(error: BaseException) -> int:
    """Say what stopped typer itself (usage errors, its help, --version); the exit code.
    Raises again what it does not know: a bug."""
    if isinstance(error, KeyboardInterrupt):
        return interrupted(error)
    if isinstance(error, SystemExit):
        # typer ends a broken pipe outside the commands (its help) with 1, after it
        # wraps standard output to silence the flush at exit; 1 means a bug here.
        if error.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
            return stdout_gone()
        raise error
    if isinstance(error, OSError):
        # Only typer's own output (help, --version) gets here: the commands turn every
        # error into a message of their own. A full disk, as for results: exit 8.
        stdout_to_devnull()
        typer.echo(f"Error: standard output: cannot write ({error.strerror})", err=True)
        return ExitCode.OUTPUT
    if not _is_usage_error(error):
        raise error
    message: str = getattr(error, "format_message")()  # noqa: B009
    if type(error).__name__ == "NoArgsIsHelpError":
        typer.echo(message)
        return ExitCode.OK
    if type(error).__name__ == "NoSuchOption":
        message = _with_likely_option(error, message)
    typer.echo(f"Error: {one_line(message)} (see --help)", err=True)
    return int(getattr(error, "exit_code"))  # noqa: B009


def _with_likely_option(error: BaseException, message: str) -> str:
    """click suggests by spelling alone (``--keep`` got "--help"): an option the given
    name begins, or is part of, is the likelier meaning."""
    given = str(getattr(error, "option_name", "") or "")
    context = getattr(error, "ctx", None)
    command = getattr(context, "command", None)
    names = [
        name
        for param in getattr(command, "params", [])
        for name in getattr(param, "opts", [])
        if name.startswith("--")
    ]
    likely = [name for name in names if given and given in name and name != given]
    if not likely:
        return message
    head = message.split(" (Possible options", 1)[0].split(" Did you mean", 1)[0]
    return f"{head}; did you mean {' or '.join(likely[:3])}?"


def ended(code: Any) -> int:
    """The exit code of a run typer ended itself: it ends an interrupt that comes while it
    parses options with 130, quietly."""
    if code == ExitCode.INTERRUPTED or was_terminated():
        return interrupted()
    return code if isinstance(code, int) else ExitCode.OK


_interrupt_said = False


def interrupted(interrupt: KeyboardInterrupt | None = None) -> int:
    """Say (once) that Ctrl-C or SIGTERM stopped the command; its exit code (130 or 143)."""
    global _interrupt_said
    terminated = isinstance(interrupt, Terminated) or was_terminated()
    if not _interrupt_said:
        _interrupt_said = True
        what = "Terminated" if terminated else "Interrupted"
        typer.echo(f"{what}; no partial output was left.", err=True)
    return ExitCode.TERMINATED if terminated else ExitCode.INTERRUPTED


def stdout_gone() -> int:
    """The reader of standard output has gone (``| head``): what it wanted was written.
    Standard output becomes /dev/null, so that Python's flush at exit does not fail
    again, and the exit code is :attr:`ExitCode.STDOUT_GONE`."""
    stdout_to_devnull()
    return ExitCode.STDOUT_GONE
