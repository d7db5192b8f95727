"""Options shared by the commands, declared once, and what they build: ``ReadOptions``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import polars as pl
import typer

import analysis
from analysis.engine.grid import parse_one_keep_versions, parse_one_max_preempts, parse_whole
from analysis.errors import SettingSyntaxError
from cli.errors import usage_error
from cli.output import progress_bar

FLAG = ""
"""The metavar of an on/off option: none (typer would show ``<bool>``, as if it took one)."""
INT, FLOAT = "<int>", "<float>"

# --------------------------------------------------------------------------- value parsers


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
    """``-k`` of replay, compare and verify: one K (a whole number, or off)."""
    try:
        return parse_one_keep_versions(value)
    except SettingSyntaxError as error:
        raise typer.BadParameter(_after_name(error)) from None


def one_max_preempts(value: str) -> int | None:
    """``-m`` of replay and compare: one M (a whole number, or none/off)."""
    try:
        return parse_one_max_preempts(value)
    except SettingSyntaxError as error:
        raise typer.BadParameter(_after_name(error), param_hint="--max-preempts") from None


def _after_name(error: SettingSyntaxError) -> str:
    """The message without the setting it names first (typer names the option itself)."""
    return str(error).split(": ", 1)[-1]


def number(value: str) -> float:
    """A decimal option's value, refused in our words."""
    try:
        return float(value)
    except ValueError:
        raise typer.BadParameter(f"expected a number (found {value!r})") from None


def whole_option(help: str) -> Any:
    """A whole-number option (of simulate): parsed and shown as such."""
    return typer.Option(help=help, parser=whole_number, metavar=INT)


def number_option(help: str) -> Any:
    """A decimal option (of simulate): parsed and shown as such."""
    return typer.Option(help=help, parser=number, metavar=FLOAT)


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


def parse_grid(keep_versions: str, max_preempts: str) -> tuple[list[int], list[int | None]]:
    """The K and M lists of sweep, plot and report. Their shape errors are usage errors
    (exit 2); a value out of range is an invalid setting (exit 7), as for a single value."""
    try:
        return analysis.parse_keep_versions(keep_versions), analysis.parse_max_preempts(
            max_preempts
        )
    except analysis.SettingSyntaxError as error:
        raise usage_error(error) from None


# --------------------------------------------------------------------------- shared options


class BadRecordPolicy(StrEnum):
    fail = "fail"
    skip = "skip"


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
IncludeEval = Annotated[
    bool,
    typer.Option(
        "--eval",
        help="Also read a folder's evaluation dumps (eval_<N>.pt), as groups of their own "
        "(ids eval:<rollout_id>:<instance or index>); left out by default.",
        metavar=FLAG,
    ),
]
OrderBy = Annotated[
    str | None,
    typer.Option(
        help="Order group arrival by this field (its per-group maximum) instead of input order."
    ),
]
LimitOption = Annotated[
    list[str] | None,
    typer.Option(
        "--limit",
        help="NAME=VALUE: raise a limit that protects memory from hostile input, e.g. "
        "max_record_bytes=256M (see the README's Limits). Names: "
        + ", ".join(analysis.Limits.names())
        + ".",
        show_default=False,
    ),
]
Traceback = Annotated[
    bool,
    typer.Option(
        "--traceback",
        help="Show the Python traceback of an error.",
        metavar=FLAG,
    ),
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


# --------------------------------------------------------------------------- reading logs


def read_options(
    *, field: list[str] | None, on_bad_record: BadRecordPolicy, trust_pickle: bool,
    order_by: str | None = None, include_eval: bool = False, limit: list[str] | None = None,
) -> analysis.ReadOptions:  # fmt: skip
    """The read options the shared flags give; a --field or --limit that does not parse
    is a usage error."""
    try:
        fields = analysis.FieldMap.parse(field or [])
        limits = analysis.Limits.parse(limit or [])
    except analysis.SettingSyntaxError as error:
        raise usage_error(error) from None
    options = analysis.ReadOptions(
        fields=fields, extra_fields=(order_by,) if order_by else (),
        on_bad_record=on_bad_record.value, trust_pickle=trust_pickle, include_eval=include_eval,
    )  # fmt: skip
    return analysis.ReadOptions.of(options, **limits)


@dataclass(frozen=True)
class Reading:
    """Inputs and how to read them, with a progress bar unless quiet."""

    inputs: Sequence[Path]
    options: analysis.ReadOptions
    order_by: str | None = None
    quiet: bool = False

    def load(
        self, columns: Sequence[str] | None = None
    ) -> tuple[pl.DataFrame, analysis.LoadReport]:
        report = analysis.LoadReport()
        with progress_bar("reading", quiet=self.quiet) as update:
            table = analysis.load_logs(
                self.inputs, self.options, report=report, progress=update, columns=columns
            )
        return table, report

    def prepare(
        self, *, whole_table: bool = False
    ) -> tuple[pl.DataFrame, analysis.PreparedLog, analysis.LoadReport]:
        """Load and prepare; the table has only the replay's columns unless ``whole_table``."""
        table, report = self.load(None if whole_table else analysis.REPLAY_COLUMNS)
        prepared = analysis.prepare(table, order_by=self.order_by)
        report.warnings += prepared.warnings
        return table, prepared, report


def reading(
    inputs: Sequence[Path], *, field: list[str] | None, on_bad_record: BadRecordPolicy,
    trust_pickle: bool, order_by: str | None = None, quiet: bool = False,
    include_eval: bool = False, limit: list[str] | None = None,
) -> Reading:  # fmt: skip
    """What the shared options of a command that reads logs say."""
    options = read_options(
        field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle, order_by=order_by,
        include_eval=include_eval, limit=limit,
    )  # fmt: skip
    return Reading(inputs, options, order_by, quiet)
