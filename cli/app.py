"""The ``dressage-replay`` command line: the typer app, its commands and its entry point."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

import analysis
from cli import on_sigterm_unwind
from cli.commands.compare import compare
from cli.commands.convert import convert
from cli.commands.inspect import inspect
from cli.commands.plot import plot
from cli.commands.replay import replay
from cli.commands.report import report
from cli.commands.simulate import simulate
from cli.commands.sweep import sweep
from cli.commands.verify import verify
from cli.errors import ReportingCommand, ended, ended_outside_command
from cli.output import reader_gone

app = typer.Typer(
    name="dressage-replay",
    help="Offline staleness analysis and replay of async RL rollout logs (Dressage, slime).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for command in (replay, sweep, plot, inspect, convert, simulate, compare, report, verify):
    app.command(cls=ReportingCommand)(command)


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import PackageNotFoundError, version

        if sys.stdout is None:  # started with it closed (`>&-`): typer would print nothing
            typer.echo("Error: standard output is closed: nowhere to print the version", err=True)
            raise typer.Exit(analysis.ExitCode.OUTPUT)
        try:
            number = version("dressage-replay")
        except PackageNotFoundError:  # run from a source tree that was never installed
            number = "unknown (not installed)"
        typer.echo(f"dressage-replay {number}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            callback=_print_version,
            is_eager=True,
            metavar="",
        ),
    ] = False,
) -> None:
    """Options given before the command (the help shown is the app's own)."""


def main() -> None:
    """Console-script entry point: usage errors as one line, Ctrl-C as exit 130, SIGTERM
    as 143 (see :mod:`cli.errors`)."""
    on_sigterm_unwind()
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 prints escaped
        if stream is not None and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        from rich.console import Console  # an import takes time: Ctrl-C may land in it

        Console.on_broken_pipe = reader_gone  # type: ignore[method-assign,assignment]  # also typer's help
        code = app(standalone_mode=False)
    except BaseException as error:
        sys.exit(ended_outside_command(error))
    sys.exit(ended(code))
