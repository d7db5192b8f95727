"""The ``dressage-replay`` command line: the typer app, its commands and its entry point."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

import analysis
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
from cli.signals import on_sigterm_unwind


def _no_breaks_at_hyphens() -> None:
    """Help text is wrapped at spaces only: a spec such as prime-rl:max_off_policy_steps=1
    or a default such as partial-rollout stays whole on its line (click's wrapper also
    breaks after a hyphen). The wrapper is click's own, vendored by typer: left as it is
    where it cannot be found."""
    # typer's own copy first; click itself (installed beside, by Ray for one) only when
    # typer has none: importing it costs a command's start 10 ms for nothing.
    for name in ("typer._click._textwrap", "click._textwrap"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        wrapper = module.TextWrapper
        if getattr(wrapper, "_whole_words", False):
            continue
        original = wrapper.__init__

        def init(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> None:
            kwargs.setdefault("break_on_hyphens", False)
            _original(self, *args, **kwargs)

        def long_word(
            self: Any, chunks: list[str], line: list[str], length: int, width: int
        ) -> None:
            if not line:  # a word longer than the column goes whole on a line of its own
                line.append(chunks.pop())

        wrapper.__init__ = init
        wrapper._handle_long_word = long_word
        wrapper._whole_words = True
        return


_no_breaks_at_hyphens()

_PLAIN_TYPES = {"<path>": "PATH", "<str>": "TEXT", "<list[Path]>": "PATH", "<list[str]>": "TEXT"}
"""What help shows for a value without a metavar of its own, in place of typer's Python
types (``<list[Path]>``, ``<str>``)."""


def _plain_metavars() -> None:
    """Help in a reader's words, not Python's: an option without a metavar shows PATH or
    TEXT (typer shows ``<path>``, ``<list[Path]>``, ``<str>``), and an argument its name
    alone, ``INPUT...`` in the usage line (typer shows ``{INPUT}...`` and
    ``INPUT <list[Path]>``). Typer's own methods are left as they are where they differ
    from those of the version this was written for."""
    from typer import core

    parameter, argument = (
        getattr(core, "_TyperParameter", None),
        getattr(core, "TyperArgument", None),
    )
    if parameter is None or argument is None or getattr(parameter, "_plain", False):
        return
    typed = parameter.display_type

    def display_type(self: Any, ctx: Any) -> str:
        shown = typed(self, ctx)
        return str(_PLAIN_TYPES.get(shown, shown))

    def usage_name(self: Any) -> str:
        name = self.display_name_raw + ("..." if self.nargs != 1 else "")
        return name if self.required else f"[{name}]"

    parameter.display_type = display_type
    parameter._plain = True
    argument.display_type_rich = lambda self, ctx: None  # the name says it
    argument._usage_display_name = usage_name


_plain_metavars()

app = typer.Typer(
    name="dressage-replay",
    help="Offline staleness analysis and replay of async RL rollout logs (Dressage, slime).",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    # Plain click help: rich's boxed tables cut long option names at 80 columns
    # (`--samples-per-…`); click's layout never cuts a name.
    rich_markup_mode=None,
)
# One line each in `dressage-replay --help`, short enough for 80 columns (click cuts a
# longer first sentence with "..."); each command's own --help says the rest.
_SUMMARIES: dict[Callable[..., Any], str] = {
    replay: "Replay one setting or --policy: kept, dropped, how stale.",
    sweep: "Replay every K, M combination at once; mark the Pareto front.",
    plot: "Draw a figure: sweep, spans, gaps, timeline or heatmap.",
    inspect: "Show what a log holds: format, counts, versions, quality.",
    convert: "Write the canonical table so big logs load fast next time.",
    simulate: "Simulate an async RL pipeline and write its log.",
    compare: "Two logs side by side: versions, gaps, spans, losses.",
    report: "Write one self-contained HTML report of a log.",
    verify: "Check that the replay reproduces a run's own decisions.",
}
for command, summary in _SUMMARIES.items():
    app.command(cls=ReportingCommand, short_help=summary)(command)


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
    from cli.output import show_library_warnings

    show_library_warnings()


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
