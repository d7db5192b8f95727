"""The ``dressage-replay`` command line: parse options, call ``analysis``, render or write."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

import analysis
from analysis.errors import EXIT_INTERRUPTED, ReplayError, counted
from analysis.load import SKIP_REASON_NOUNS
from analysis.sweep import ValueListError, parse_whole
from cli import EXIT_TERMINATED, Terminated, on_sigterm_unwind, was_terminated

app = typer.Typer(
    name="dressage-replay",
    help="Offline staleness analysis and replay of async RL rollout logs (Dressage, slime).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import PackageNotFoundError, version

        if sys.stdout is None:  # started with it closed (`>&-`): typer would print nothing
            typer.echo("Error: standard output is closed: nowhere to print the version", err=True)
            raise typer.Exit(analysis.OutputError.exit_code)
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


def one_line(message: str) -> str:
    """Errors are one line: messages quoted from other libraries may span several."""
    return " ".join(message.split())


def handles_errors(command: F) -> F:
    """Turn library errors into one line on stderr and a documented exit code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        show_traceback = bool(kwargs.get("traceback_"))
        try:
            return command(*args, **kwargs)
        except ReplayError as error:
            if show_traceback:
                traceback.print_exc()
            typer.echo(f"Error: {one_line(str(error))}", err=True)
            raise typer.Exit(error.exit_code) from None
        except KeyboardInterrupt as interrupt:
            raise typer.Exit(interrupted(interrupt)) from None
        except BrokenPipeError:
            raise typer.Exit(stdout_gone()) from None
        except (typer.Exit, typer.Abort, typer.BadParameter, SystemExit):
            raise
        except BaseException as error:  # also a panic inside a native library
            if show_traceback:
                traceback.print_exc()
            typer.echo(
                f"Error: internal error ({type(error).__name__}: {one_line(str(error))}); "
                "rerun with --traceback and report it",
                err=True,
            )
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


_interrupt_said = False


def interrupted(interrupt: KeyboardInterrupt | None = None) -> int:
    """Say (once) that Ctrl-C or SIGTERM stopped the command; its exit code (130 or 143)."""
    global _interrupt_said
    terminated = isinstance(interrupt, Terminated) or was_terminated()
    if not _interrupt_said:
        _interrupt_said = True
        what = "Terminated" if terminated else "Interrupted"
        typer.echo(f"{what}; no partial output was left.", err=True)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


# --------------------------------------------------------------------------- shared options

FLAG = ""
"""The metavar of an on/off option: none (typer would show ``<bool>``, as if it took one)."""
INT, FLOAT = "<int>", "<float>"


def _whole(value: str | int) -> int | None:
    """``value`` as an integer by the rule of the K and M lists (``parse_whole``: "3.0"
    is 3, as typer took it; "1e3" is not); None for anything else. (typer passes an
    option's default through the parser too: an int.)"""
    if isinstance(value, int):
        return value
    try:
        return parse_whole(value)
    except ValueError:
        return None


def whole_number(value: str) -> int:
    """An integer option's value, refused in our words (typer's come from pydantic:
    "Input should be a valid integer, unable to parse string as an integer")."""
    if (whole := _whole(value)) is None:
        raise typer.BadParameter(f"expected a whole number (found {value!r})")
    return whole


def one_keep_versions(value: str) -> int:
    """``-k`` of replay and compare: one K. A list there is the sweep's, said so."""
    if (whole := _whole(value)) is None:
        listed = "," in value or ".." in value
        raise typer.BadParameter(
            f"expected a whole number (found {value!r})"
            + ("; lists of K values are for sweep, plot and report" if listed else "")
        )
    return whole


def whole_option(help: str) -> Any:
    """A whole-number option (of simulate): parsed and shown as such."""
    return typer.Option(help=help, parser=whole_number, metavar=INT)


def number_option(help: str) -> Any:
    """A decimal option (of simulate): parsed and shown as such."""
    return typer.Option(help=help, parser=number, metavar=FLOAT)


def number(value: str) -> float:
    """A decimal option's value, refused in our words."""
    try:
        return float(value)
    except ValueError:
        raise typer.BadParameter(f"expected a number (found {value!r})") from None


Inputs = Annotated[
    list[Path],
    typer.Argument(
        help="Log files or folders: JSONL (.gz), Dressage artifact folder, slime .pt dumps, "
        "canonical Parquet/Arrow. Read in the order given.",
        show_default=False,
        readable=False,  # an unreadable input is the loader's to report (exit 3), not click's
        metavar="INPUT",
    ),
]
FieldOption = Annotated[
    list[str] | None,
    typer.Option(
        "--field",
        help="MEANING=PATH: read a meaning from another (dotted) field, e.g. "
        "group=metadata.prompt_id. Meanings: " + ", ".join(analysis.FieldMap.meanings()) + ".",
        show_default=False,
    ),
]


E = TypeVar("E", bound=StrEnum)


def one_of(choices: type[E]) -> Callable[[str], E]:
    """A parser for an option with a fixed set of values, in any letter case, refused in
    our words (typer's come from pydantic: "Value error, 'x' is not one of ...")."""
    names = [choice.value for choice in choices]

    def parse(value: str) -> E:
        try:
            return choices(value.lower())
        except ValueError:
            raise typer.BadParameter(
                f"expected one of {', '.join(names)} (found {value!r})"
            ) from None

    return parse


def choice_metavar(choices: type[StrEnum]) -> str:
    return "<" + "|".join(choice.value for choice in choices) + ">"


class BadRecordPolicy(StrEnum):
    fail = "fail"
    skip = "skip"


OnBadRecord = Annotated[
    BadRecordPolicy,
    typer.Option(
        help="fail: stop at the first bad record; skip: skip bad records and report them.",
        parser=one_of(BadRecordPolicy),
        metavar=choice_metavar(BadRecordPolicy),
    ),
]
TrustPickle = Annotated[
    bool,
    typer.Option(
        "--trust-pickle",
        help="Fully unpickle .pt/pickle files (runs code from the file: only for files you trust).",
        metavar=FLAG,
    ),
]
OrderBy = Annotated[
    str | None,
    typer.Option(
        help="Order group arrival by this field (its per-group maximum) instead of input order."
    ),
]
Traceback = Annotated[
    bool, typer.Option("--traceback", help="Show the Python traceback of an error.", metavar=FLAG)
]
Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="No progress bars (they are off anyway when stderr is not a terminal).",
        metavar=FLAG,
    ),
]
KeepVersionsList = Annotated[
    str, typer.Option("--keep-versions", "-k", help="K values: 0,1,2,4 or ranges like 0..6.")
]
MaxPreemptsList = Annotated[
    str, typer.Option("--max-preempts", "-m", help="M values: none,0,1,2 or ranges like none,0..3.")
]
BatchGroups = Annotated[
    int | None,
    typer.Option(
        "--batch-groups",
        "-b",
        help="B: groups per trainer batch (default: inferred from trainer steps).",
        parser=whole_number,
        metavar=INT,
    ),
]


@dataclass(frozen=True)
class LoadOptions:
    """What every command needs to read its inputs."""

    inputs: list[Path]
    fields: analysis.FieldMap
    on_bad_record: str
    trust_pickle: bool
    order_by: str | None
    quiet: bool = False

    def load(self, columns: Sequence[str] | None = None) -> tuple[Any, analysis.LoadReport]:
        report = analysis.LoadReport()
        with progress_bar("reading", quiet=self.quiet) as update:
            table = analysis.load_logs(
                self.inputs,
                fields=self.fields,
                extra_fields=[self.order_by] if self.order_by else [],
                on_bad_record=self.on_bad_record,  # type: ignore[arg-type]
                trust_pickle=self.trust_pickle,
                report=report,
                progress=update,
                columns=columns,
            )
        return table, report

    def prepare(
        self, *, whole_table: bool = False
    ) -> tuple[Any, analysis.PreparedLog, analysis.LoadReport]:
        """Load and prepare; the table has only the replay's columns unless ``whole_table``."""
        table, report = self.load(None if whole_table else analysis.REPLAY_COLUMNS)
        prepared = analysis.prepare(table, order_by=self.order_by)
        report.warnings += prepared.warnings
        return table, prepared, report


def load_options(
    inputs: list[Path],
    *,
    field: list[str] | None,
    on_bad_record: BadRecordPolicy,
    trust_pickle: bool,
    order_by: str | None = None,
    quiet: bool = False,
) -> LoadOptions:
    overrides: dict[str, str] = {}
    for item in field or []:
        meaning, sep, path = item.partition("=")
        if not sep or not path or meaning not in analysis.FieldMap.meanings():
            raise typer.BadParameter(
                f"expected MEANING=PATH with MEANING one of {', '.join(analysis.FieldMap.meanings())} "
                f"(found {item!r})",
                param_hint="--field",
            )
        if overrides.get(meaning, path) != path:  # the last would win, silently
            raise typer.BadParameter(
                f"{meaning} is given twice ({meaning}={overrides[meaning]}, {item}); "
                "give each meaning once",
                param_hint="--field",
            )
        overrides[meaning] = path
    fields = analysis.FieldMap().override(**overrides)
    return LoadOptions(inputs, fields, on_bad_record.value, trust_pickle, order_by, quiet)


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


def parse_grid(keep_versions: str, max_preempts: str) -> tuple[list[int], list[int | None]]:
    """The K and M lists of sweep, plot and report."""
    return (
        parse_list(analysis.parse_keep_versions, keep_versions, "--keep-versions"),
        parse_list(analysis.parse_max_preempts, max_preempts, "--max-preempts"),
    )


def parse_list(parse: Callable[[str], list[Any]], text: str, option: str) -> list[Any]:
    """Parse a list option; its shape errors are usage errors (exit 2), a value out of
    range an invalid setting (exit 7) as for a single value."""
    try:
        return parse(text)
    except ValueListError as error:
        raise typer.BadParameter(
            str(error).removeprefix(f"{option}: "), param_hint=option
        ) from None


def parse_max_preempts(value: str) -> int | None:
    """``none`` or a whole number; anything else is a usage error."""
    if value.strip().lower() == "none":
        return None
    if (whole := _whole(value)) is None:  # as -k: "1.0" is 1
        raise typer.BadParameter(
            f"expected a whole number or 'none' (found {value!r})", param_hint="--max-preempts"
        )
    return whole


EXIT_STDOUT_GONE = 141
"""Exit code when the reader of standard output has gone (``| head``): 128 + SIGPIPE, as
for Unix tools that die of it."""


@contextlib.contextmanager
def results_out() -> Iterator[None]:
    """Results printed to standard output. One that cannot take them (a full disk) is an
    output error, exit 8, not an internal error; a reader that has gone (``| head``) ends
    the command quietly with 141 (see :func:`stdout_gone`)."""
    if sys.stdout is None:  # started with it closed (`>&-`)
        raise analysis.OutputError(
            "standard output is closed: the results cannot be printed; "
            "send them to a terminal, a pipe or a file"
        )
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        raise  # handles_errors ends the command quietly
    except OSError as exc:
        _stdout_to_devnull()  # what it holds unwritten must not fail again at exit
        raise analysis.OutputError(
            f"standard output: cannot write the results ({exc.strerror}); "
            "write them where there is room"
        ) from None


def stdout_gone() -> int:
    """The reader of standard output has gone (``| head``): what it wanted was written.
    Standard output becomes /dev/null, so that Python's flush at exit does not fail
    again, and the exit code is :data:`EXIT_STDOUT_GONE`."""
    _stdout_to_devnull()
    return EXIT_STDOUT_GONE


def _stdout_to_devnull() -> None:
    with contextlib.suppress(OSError, ValueError):  # (no file descriptor: captured)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _reader_gone(console: Any) -> None:
    """rich's own handling exits with 1, which this tool's exit codes call an internal
    error: raise the error instead, to end the command with 141."""
    raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def stdout_console() -> Any:
    from rich.console import Console

    # Piped or captured output is not cut to 80 columns: tables stay whole in files.
    width = None if sys.stdout.isatty() else 120
    return Console(file=sys.stdout, highlight=False, soft_wrap=False, width=width)


# --------------------------------------------------------------------------- commands


@app.command()
@handles_errors
def replay(
    inputs: Inputs,
    keep_versions: Annotated[
        int,
        typer.Option(
            "--keep-versions",
            "-k",
            help="K: keep groups from the K newest observed versions; 0 disables.",
            parser=one_keep_versions,
            metavar=INT,
        ),
    ] = 0,
    max_preempts: Annotated[
        str,
        typer.Option(
            "--max-preempts",
            "-m",
            help="M: a trajectory may span at most M+1 versions; 'none' disables.",
        ),
    ] = "none",
    batch_groups: BatchGroups = None,
    order_by: OrderBy = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the summary as one JSON object.", metavar=FLAG)
    ] = False,
    decisions: Annotated[
        Path | None,
        typer.Option(
            help="Write one row per group to a file: .csv, .parquet, .json, .jsonl or .arrow."
        ),
    ] = None,
    bias: Annotated[
        bool,
        typer.Option(
            "--bias",
            help="Also compare kept, dropped and rejected groups (who gets dropped).",
            metavar=FLAG,
        ),
    ] = False,
    field: FieldOption = None,
    on_bad_record: OnBadRecord = BadRecordPolicy.fail,
    trust_pickle: TrustPickle = False,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Replay both staleness controls for one setting and summarise what they would do."""
    config = analysis.ReplayConfig(
        keep_versions=keep_versions,
        max_preempts=parse_max_preempts(max_preempts),
        batch_groups=batch_groups,
    )
    if decisions is not None:  # before the log is read: a typo is told at once
        analysis.check_output(decisions, analysis.FRAME_FORMATS, inputs=inputs)
    options = load_options(
        inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle,
        order_by=order_by, quiet=quiet,
    )  # fmt: skip
    table, prepared, report = options.prepare(whole_table=bias)
    result = analysis.replay(prepared, config)
    if decisions is not None:
        analysis.write_decisions(result, decisions, inputs=inputs)
    dropped = analysis.who_gets_dropped(prepared, result, table=table) if bias else None
    with results_out():
        if json_output:
            extra = {"bias": dropped.to_dict()} if dropped else {}
            typer.echo(json.dumps({**result.summary.to_dict(), **extra, **report_dict(report)}))
        else:
            from cli.render import print_bias, print_summary

            print_summary(result.summary, stdout_console())
            if dropped is not None:
                print_bias(dropped, stdout_console())
    warn(report)


@app.command()
@handles_errors
def sweep(
    inputs: Inputs,
    keep_versions: KeepVersionsList = "0..4",
    max_preempts: MaxPreemptsList = "none,0..3",
    batch_groups: BatchGroups = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the rows to a file: .csv, .parquet, .json, .jsonl or .arrow.",
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the rows as JSON.", metavar=FLAG)
    ] = False,
    order_by: OrderBy = None,
    field: FieldOption = None,
    on_bad_record: OnBadRecord = BadRecordPolicy.fail,
    trust_pickle: TrustPickle = False,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Replay every combination of K and M from one load of the log; mark the Pareto front."""
    ks, ms = parse_grid(keep_versions, max_preempts)
    if output is not None:  # before the log is read: a typo is told at once
        analysis.check_output(output, analysis.FRAME_FORMATS, inputs=inputs)
    options = load_options(
        inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle,
        order_by=order_by, quiet=quiet,
    )  # fmt: skip
    _, prepared, report = options.prepare()
    with progress_bar("replaying settings", quiet=quiet) as update:
        result = analysis.sweep(
            prepared, keep_versions=ks, max_preempts=ms, batch_groups=batch_groups, progress=update
        )
    if output is not None:
        analysis.write_frame_to(result.rows, output, inputs=inputs)
    with results_out():
        if json_output:
            typer.echo(json.dumps(result.rows.to_dicts()))
        else:
            from cli.render import print_sweep

            print_sweep(result, stdout_console())
    warn(report)


class PlotKind(StrEnum):
    sweep = "sweep"
    spans = "spans"
    gaps = "gaps"
    timeline = "timeline"
    heatmap = "heatmap"


@app.command()
@handles_errors
def plot(
    kind: Annotated[
        PlotKind,
        typer.Argument(
            help="What to draw: sweep, spans, gaps, timeline or heatmap.",
            show_default=False,
            parser=one_of(PlotKind),
            metavar="KIND",
        ),
    ],
    inputs: Inputs,
    output: Annotated[Path, typer.Option("--output", "-o", help="Image file: .png, .svg or .pdf.")],
    keep_versions: KeepVersionsList = "0..4",
    max_preempts: MaxPreemptsList = "none,0..3",
    batch_groups: BatchGroups = None,
    order_by: OrderBy = None,
    field: FieldOption = None,
    on_bad_record: OnBadRecord = BadRecordPolicy.fail,
    trust_pickle: TrustPickle = False,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Draw a figure: sweep, spans, gaps, timeline or heatmap (single-setting kinds use the first K and M)."""
    from analysis.plots import FIGURE_FORMATS, make_plot, save_figure

    ks, ms = parse_grid(keep_versions, max_preempts)
    analysis.check_output(output, FIGURE_FORMATS, what="figure", inputs=inputs)
    options = load_options(
        inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle,
        order_by=order_by, quiet=quiet,
    )  # fmt: skip
    _, prepared, report = options.prepare()
    with progress_bar("replaying settings", quiet=quiet) as update:
        figure = make_plot(
            kind.value, prepared, keep_versions=ks, max_preempts=ms,
            batch_groups=batch_groups, progress=update,
        )  # fmt: skip
    save_figure(figure, output)
    typer.echo(f"wrote {output}", err=True)
    warn(report)


@app.command()
@handles_errors
def inspect(
    inputs: Inputs,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the findings as one JSON object.", metavar=FLAG)
    ] = False,
    field: FieldOption = None,
    on_bad_record: OnBadRecord = BadRecordPolicy.fail,
    trust_pickle: TrustPickle = False,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Show what a log holds: format, counts, versions in observation order, data quality."""
    options = load_options(
        inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle, quiet=quiet
    )
    table, report = options.load()
    inspection = analysis.inspect_log(table, report)
    with results_out():
        if json_output:
            typer.echo(json.dumps({**inspection.to_dict(), **report_dict(report)}))
        else:
            from cli.render import print_inspection

            print_inspection(inspection, stdout_console())
    warn(report)


@app.command()
@handles_errors
def convert(
    inputs: Inputs,
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", help="Output file: .parquet (or .arrow) in the canonical layout."
        ),
    ],
    order_by: Annotated[
        str | None,
        typer.Option(
            help="Keep this field as a column, so that a replay of the output can order "
            "group arrival by it (--order-by); rows stay in input order."
        ),
    ] = None,
    field: FieldOption = None,
    on_bad_record: OnBadRecord = BadRecordPolicy.fail,
    trust_pickle: TrustPickle = False,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Write the canonical table (one row per record) so big logs load fast next time."""
    options = load_options(
        inputs,
        field=field,
        on_bad_record=on_bad_record,
        trust_pickle=trust_pickle,
        quiet=quiet,
        order_by=order_by,
    )
    report = analysis.LoadReport()
    with progress_bar("converting", quiet=quiet) as update:
        rows = analysis.convert_logs(
            inputs, output, fields=options.fields,
            extra_fields=[order_by] if order_by else [],
            on_bad_record=options.on_bad_record,  # type: ignore[arg-type]
            trust_pickle=trust_pickle, report=report, progress=update,
        )  # fmt: skip
    typer.echo(f"wrote {rows:,} records to {output}", err=True)
    warn(report)


class LogFormatChoice(StrEnum):
    jsonl = "jsonl"
    parquet = "parquet"
    artifacts = "artifacts"
    pt = "pt"


@app.command()
@handles_errors
def simulate(
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", help="Output file (jsonl, parquet) or folder (artifacts, pt)."
        ),
    ],
    log_format: Annotated[
        LogFormatChoice | None,
        typer.Option(
            "--format",
            help="What to write (default: from the extension, .jsonl[.gz] or .parquet; "
            "artifacts and pt write a new folder).",
            parser=one_of(LogFormatChoice),
            metavar=choice_metavar(LogFormatChoice),
        ),
    ] = None,
    seed: Annotated[
        int,
        whole_option("Random seed: the same seed gives the same log."),
    ] = 0,
    groups: Annotated[int, whole_option("GRPO prompt groups to generate.")] = 64,
    samples_per_prompt: Annotated[int, whole_option("Trajectories per group.")] = 4,
    max_active_groups: Annotated[int, whole_option("Groups in flight at once.")] = 16,
    batch_groups: Annotated[int, whole_option("Groups per trainer step.")] = 4,
    train_step_time: Annotated[
        float,
        number_option("Seconds per trainer step; each step publishes a version."),
    ] = 20.0,
    token_time: Annotated[
        float,
        number_option("Seconds per generated token of one trajectory."),
    ] = 0.01,
    median_tokens: Annotated[
        int,
        whole_option("Median response tokens per trajectory."),
    ] = 300,
    tail_sigma: Annotated[
        float,
        number_option("Log-normal spread of response lengths (heavier tail when larger)."),
    ] = 0.9,
    max_tokens: Annotated[int, whole_option("Longest response, in tokens.")] = 16_000,
    multi_turn_fraction: Annotated[
        float,
        number_option("Fraction of multi-turn trajectories."),
    ] = 0.3,
    multi_segment_fraction: Annotated[
        float,
        number_option("Fraction of multi-turn trajectories split into two segment records."),
    ] = 0.2,
    partial_rollout: Annotated[
        bool,
        typer.Option(
            help="Resume interrupted generation under the new version (else restart).",
            metavar=FLAG,
        ),
    ] = True,
    log_prob_drift: Annotated[
        float,
        number_option(
            "Write rollout and trainer log-probs whose difference grows by this per version behind (0: none)."
        ),
    ] = 0.0,
    log_prob_noise: Annotated[
        float,
        number_option("Spread of the log-prob difference at 0 versions behind."),
    ] = 0.02,
    abort_fraction: Annotated[
        float,
        number_option("Fraction of groups with an aborted sample."),
    ] = 0.0,
    traceback_: Traceback = False,
) -> None:
    """Simulate an async rollout/training pipeline and write its log (see README: Simulator)."""
    config = analysis.SimulationConfig(
        n_groups=groups, n_samples_per_prompt=samples_per_prompt,
        max_active_groups=max_active_groups, batch_groups=batch_groups,
        train_step_time=train_step_time, token_time=token_time,
        median_response_tokens=median_tokens, tail_sigma=tail_sigma,
        max_response_tokens=max_tokens, multi_turn_fraction=multi_turn_fraction,
        multi_segment_fraction=multi_segment_fraction, partial_rollout=partial_rollout,
        abort_fraction=abort_fraction, log_prob_drift=log_prob_drift,
        log_prob_noise=log_prob_noise, seed=seed,
    )  # fmt: skip
    chosen = analysis.log_format_for(output, log_format.value if log_format else None)
    count = analysis.write_log(analysis.simulate(config), output, chosen)
    typer.echo(f"wrote {count:,} records ({groups:,} groups) to {output}", err=True)


@app.command()
@handles_errors
def compare(
    first: Annotated[
        Path,
        typer.Argument(help="The first log (file or folder).", show_default=False, readable=False),
    ],
    second: Annotated[
        Path,
        typer.Argument(help="The second log (file or folder).", show_default=False, readable=False),
    ],
    keep_versions: Annotated[
        int,
        typer.Option(
            "--keep-versions",
            "-k",
            help="K applied to both logs.",
            parser=one_keep_versions,
            metavar=INT,
        ),
    ] = 0,
    max_preempts: Annotated[
        str, typer.Option("--max-preempts", "-m", help="M applied to both logs.")
    ] = "none",
    batch_groups: BatchGroups = None,
    names: Annotated[
        str | None,
        typer.Option(help="Names of the two runs, comma-separated (default: the file names)."),
    ] = None,
    plot_file: Annotated[
        Path | None, typer.Option("--plot", help="Also draw the comparison to this .png/.svg/.pdf.")
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the comparison as JSON.", metavar=FLAG)
    ] = False,
    field: FieldOption = None,
    on_bad_record: OnBadRecord = BadRecordPolicy.fail,
    trust_pickle: TrustPickle = False,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Two logs side by side: versions, gap and span distributions, losses, log-prob drift by gap."""
    config = analysis.ReplayConfig(
        keep_versions=keep_versions, max_preempts=parse_max_preempts(max_preempts),
        batch_groups=batch_groups,
    )  # fmt: skip
    stems = (first.name.split(".")[0], second.name.split(".")[0])
    default = ",".join(stems) if stems[0] != stems[1] else "A,B"
    run_names = tuple(name.strip() for name in (names or default).split(","))
    if len(run_names) != 2 or run_names[0] == run_names[1]:
        raise typer.BadParameter(
            "expected two different names, e.g. baseline,controlled", param_hint="--names"
        )
    if plot_file is not None:  # before the logs are read: a typo is told at once
        from analysis.plots import FIGURE_FORMATS

        analysis.check_output(plot_file, FIGURE_FORMATS, what="figure", inputs=[first, second])
    loaded = [
        load_options([path], field=field, on_bad_record=on_bad_record,
                     trust_pickle=trust_pickle, quiet=quiet).load()
        for path in (first, second)
    ]  # fmt: skip
    tables = [table for table, _ in loaded]
    result = analysis.compare_logs(
        tables[0],
        tables[1],
        config_a=config,
        config_b=config,
        names=run_names,  # type: ignore[arg-type]
    )
    if plot_file is not None:
        from analysis.compare import plot_compare
        from analysis.plots import save_figure

        save_figure(plot_compare(result), plot_file)
        typer.echo(f"wrote {plot_file}", err=True)  # as plot and report say
    with results_out():
        if json_output:
            typer.echo(json.dumps(result.to_dict()))
        else:
            from cli.render import print_compare

            print_compare(result, stdout_console())
    for _, report in loaded:  # skipped records and warnings were dropped unsaid before
        warn(report)


@app.command()
@handles_errors
def report(
    inputs: Inputs,
    output: Annotated[Path, typer.Option("--output", "-o", help="The .html file to write.")],
    keep_versions: KeepVersionsList = "0..4",
    max_preempts: MaxPreemptsList = "none,0..3",
    batch_groups: BatchGroups = None,
    order_by: OrderBy = None,
    field: FieldOption = None,
    on_bad_record: OnBadRecord = BadRecordPolicy.fail,
    trust_pickle: TrustPickle = False,
    quiet: Quiet = False,
    traceback_: Traceback = False,
) -> None:
    """Write one self-contained HTML report: the log, the sweep, the plots, who gets dropped."""
    from analysis.report import REPORT_FORMATS, build_report, write_report

    ks, ms = parse_grid(keep_versions, max_preempts)
    analysis.check_output(output, REPORT_FORMATS, what="report", inputs=inputs)
    options = load_options(
        inputs, field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle,
        order_by=order_by, quiet=quiet,
    )  # fmt: skip
    table, prepared, loaded = options.prepare(whole_table=True)
    with progress_bar("replaying settings", quiet=quiet) as update:
        document = build_report(
            prepared, table, analysis.inspect_log(table, loaded),
            keep_versions=ks, max_preempts=ms, batch_groups=batch_groups, progress=update,
        )  # fmt: skip
    write_report(document, output, inputs=inputs)
    typer.echo(f"wrote {output}", err=True)
    warn(loaded)


def report_dict(report: analysis.LoadReport) -> dict[str, Any]:
    """The load report's skips as extra JSON keys (only when something was skipped)."""
    if not report.skipped:
        return {}
    return {"skipped": {"by_reason": dict(report.skipped), "first": report.skipped_where}}


def warn(report: analysis.LoadReport) -> None:
    """Load warnings and skipped records, on stderr."""
    for warning in report.warnings:
        typer.echo(f"warning: {one_line(warning)}", err=True)
    skipped = sum(report.skipped.values())
    if skipped:
        reasons = ", ".join(
            counted(count, *SKIP_REASON_NOUNS.get(reason, (reason, reason)))
            for reason, count in report.skipped.items()
        )
        typer.echo(f"warning: skipped {reasons}; the first:", err=True)
        for where in report.skipped_where:
            typer.echo(f"  {one_line(where)}", err=True)


def main() -> None:
    """Console-script entry point: usage errors as one line, Ctrl-C as exit 130, SIGTERM
    as 143."""
    on_sigterm_unwind()
    from rich.console import Console

    Console.on_broken_pipe = _reader_gone  # type: ignore[method-assign]  # also typer's help
    try:
        code = app(standalone_mode=False)
    except KeyboardInterrupt as interrupt:
        sys.exit(interrupted(interrupt))
    except SystemExit as end:
        # typer ends a broken pipe outside the commands (its help) with 1, after it
        # wraps standard output to silence the flush at exit; 1 means a bug here.
        if end.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
            sys.exit(stdout_gone())
        raise
    except OSError as error:
        # Only typer's own output (help, --version) gets here: the commands turn every
        # error into a message of their own. A full disk, as for results: exit 8.
        _stdout_to_devnull()
        typer.echo(f"Error: standard output: cannot write ({error.strerror})", err=True)
        sys.exit(analysis.OutputError.exit_code)
    except Exception as error:
        # typer's usage errors (unknown option, bad value) carry a message and exit code 2;
        # they are told apart by shape because typer keeps their classes private.
        message = getattr(error, "format_message", None)
        exit_code = getattr(error, "exit_code", None)
        if message is None or not isinstance(exit_code, int):
            raise
        if type(error).__name__ == "NoArgsIsHelpError":
            typer.echo(message())
            sys.exit(0)
        typer.echo(f"Error: {one_line(message())} (see --help)", err=True)
        sys.exit(exit_code)
    if code == EXIT_INTERRUPTED or was_terminated():
        # typer ends an interrupt that comes while it parses options with 130, quietly.
        sys.exit(interrupted())
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
