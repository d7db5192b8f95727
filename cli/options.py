"""Options shared by the commands, declared once, and what they build: ``ReadOptions``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

import analysis
from analysis import SettingSyntaxError
from cli.errors import usage_error
from cli.output import progress_bar

if TYPE_CHECKING:  # polars is imported by the commands that read logs, when they do
    import polars as pl

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
        return analysis.parse_whole(value)
    except ValueError:
        return None


def whole_number(value: str) -> int:
    """An integer option's value, refused in our words (typer's come from pydantic:
    "Input should be a valid integer, unable to parse string as an integer")."""
    if (whole := _whole(value)) is None:
        raise typer.BadParameter(f"expected a whole number (found {value!r})")
    return whole


def draws_number(value: str) -> int:
    """``--draws``: how many simulations, 1 to 1,000."""
    draws = whole_number(value)
    if not 1 <= draws <= analysis.MOST_DRAWS:
        raise typer.BadParameter(
            f"expected a whole number from 1 to {analysis.MOST_DRAWS:,} (found {value})"
        )
    return draws


def seed_number(value: str) -> int:
    """``--seed``: a non-negative whole number (the first draw's seed)."""
    seed = whole_number(value)
    if seed < 0:
        raise typer.BadParameter(f"expected a whole number, 0 or more (found {value})")
    return seed


def one_keep_versions(value: str) -> int:
    """``-k`` of replay, compare and verify: one K (a whole number, or off)."""
    try:
        return analysis.parse_one_keep_versions(value)
    except SettingSyntaxError as error:
        raise typer.BadParameter(_after_name(error)) from None


def one_max_preempts(value: str) -> int | None:
    """``-m`` of replay and compare: one M (a whole number, or none/off)."""
    try:
        return analysis.parse_one_max_preempts(value)
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


# --------------------------------------------------------------------------- policies


PolicyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--policy",
        help="A staleness policy, as NAME:KNOB=VALUE,...: dressage:k=2,m=1, "
        "prime-rl:max_off_policy_steps=1, verl-drop:max_off_policy_threshold=2, "
        "nemo-windowed:max_staleness_versions=1[,order=freshest]; a peer rule's "
        "clock=own|steps|logged|versions (default own: the system's own step counter; "
        "docs/semantics.md §13); replaces -k and -m. One; sweep, plot and report take several.",
        metavar="SPEC",
        show_default=False,
    ),
]


def policies_option(help: str) -> Any:
    """``--policy`` of sweep, plot and report (repeatable): each its own help."""
    return typer.Option("--policy", help=help, metavar="SPEC", show_default=False)


def one_policy(text: str, *, beside: Sequence[str] = ()) -> analysis.Policy:
    """``--policy``'s policy; -k or -m beside it is a usage error (the spec holds K and M).
    A spec that does not parse or is out of range is an invalid setting (exit 7), said in
    one line with the known policies and knobs. A bound left at its default is said in a
    note (``prime-rl`` alone is ``max_off_policy_steps=8``)."""
    if beside:  # the names of -k and -m when given (the parser says so)
        raise typer.BadParameter(
            "give K and M inside the policy (dressage:k=K,m=M), not beside it",
            param_hint="--policy",
        )
    policy = analysis.parse_policy(text)
    for knob, value in analysis.defaults_applied(policy, text).items():
        typer.echo(
            f"note: --policy {text.strip()}: {knob}={value}, {policy.name}'s default "
            f"(give {policy.name}:{knob}=N to choose)",
            err=True,
        )
    return policy


def the_policy(texts: list[str], *, beside: Sequence[str] = ()) -> analysis.Policy:
    """``replay --policy``: exactly one policy (replay replays one; sweep compares several)."""
    if len(texts) > 1:
        raise typer.BadParameter(
            f"replay takes one policy (given {len(texts)}); to compare several, "
            "give them to sweep (or plot sweep, report)",
            param_hint="--policy",
        )
    return one_policy(texts[0], beside=beside)


def some_policies(texts: list[str]) -> list[analysis.Policy]:
    """``--policy`` of sweep, plot and report: each policy once, in the order first given;
    one given twice (under any spelling) is said in a note and gets one row."""
    policies: list[analysis.Policy] = []
    for text in texts:
        policy = one_policy(text)
        if policy in policies:
            typer.echo(f"note: --policy {text.strip()}: given twice; one row for it", err=True)
            continue
        policies.append(policy)
    return policies


# --------------------------------------------------------------------------- shared options


class BadRecordPolicy(StrEnum):
    fail = "fail"
    skip = "skip"


Inputs = Annotated[
    list[Path],
    typer.Argument(
        help="Log files or folders: JSONL (.gz), a Dressage artifact or run folder, slime .pt "
        "dumps, canonical Parquet/Arrow (a file or a folder of parts), prime-rl, AReaL, verl "
        "or NeMo-RL logs. Read in the order given.",
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
        metavar="MEANING=PATH",
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


def _format_name(value: str) -> str:
    """A ``--format`` value: one of the formats' names, in any letter case."""
    names = analysis.format_names()
    if value.lower() not in names:
        raise typer.BadParameter(f"expected one of {', '.join(names)} (found {value!r})")
    return value.lower()


LogFormatOption = Annotated[
    str | None,
    typer.Option(
        "--format",
        help="Read every file given, and a folder's JSONL files, as this format instead of "
        "the one found: prime-rl traces.jsonl, AReaL rollout dumps, verl rollout_data_dir, "
        "NeMo-RL train_data_step dumps, or one of ours (default: found from names and the "
        "first record).",
        parser=_format_name,
        metavar="<" + "|".join(analysis.format_names()) + ">",
        show_default=False,
    ),
]
OrderBy = Annotated[
    str | None,
    typer.Option(
        help="Order group arrival by this field (its per-group maximum) instead of input order.",
        metavar="FIELD",
    ),
]
LimitOption = Annotated[
    list[str] | None,
    typer.Option(
        "--limit",
        help="NAME=VALUE: raise a limit that protects memory from hostile input, e.g. "
        "max_record_bytes=256M (see docs/pages/reference/limits.md). Names: "
        + ", ".join(analysis.Limits.names())
        + ".",
        metavar="NAME=VALUE",
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
Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="Say the detail behind a warning given in short.",
        metavar=FLAG,
    ),
]
Force = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Replace an output that exists (a file, or a folder that is not empty); "
        "without it an existing output is refused.",
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
    str,
    typer.Option(
        "--keep-versions", "-k", help="K values: 0,1,2,4 or ranges like 0..6.", metavar="LIST"
    ),
]
MaxPreemptsList = Annotated[
    str,
    typer.Option(
        "--max-preempts",
        "-m",
        help="M values: none,0,1,2 or ranges like none,0..3.",
        metavar="LIST",
    ),
]


def one_loop(text: str) -> str:
    """``--loop``: one of Dressage's two collector loops."""
    word = text.strip().lower()
    if word not in ("partial", "fully"):
        raise typer.BadParameter(f"{text!r} is not a loop; give partial or fully")
    return word


LoopOption = Annotated[
    str | None,
    typer.Option(
        "--loop",
        help="Dressage's loop that made a run folder: partial (partial_async_rollout) or "
        "fully (fully_async_rollout); default: the one its files tell.",
        parser=one_loop,
        metavar="<partial|fully>",
        show_default=False,
    ),
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
WhatIfOption = Annotated[
    str,
    typer.Option(
        "--what-if",
        help="A run folder's rows at settings other than its own: 'model' (the run's loop "
        "simulated on a model fitted to the run; docs/semantics.md §12.8) or 'replay' (the "
        "run's attempts only, §12.7).",
        metavar="model|replay",
    ),
]
DrawsOption = Annotated[
    int,
    typer.Option(
        "--draws",
        help="A run folder's model: simulations per setting (figures are their mean, with "
        "their range).",
        parser=draws_number,
        metavar=INT,
    ),
]
SeedOption = Annotated[
    int,
    typer.Option(
        "--seed",
        help="A run folder's model: the first draw's seed (the same seed gives the same rows).",
        parser=seed_number,
        metavar=INT,
    ),
]


# --------------------------------------------------------------------------- reading logs


def read_options(
    *, field: list[str] | None, on_bad_record: BadRecordPolicy, trust_pickle: bool,
    order_by: str | None = None, include_eval: bool = False, log_format: str | None = None,
    limit: list[str] | None = None,
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
        log_format=log_format,
    )  # fmt: skip
    return analysis.ReadOptions.of(options, **limits)


def run_limits(limit: list[str] | None) -> analysis.Limits:
    """The limits --limit gives, for a command that reads a run folder itself (replay RUN,
    verify, simulate --like); one that does not parse is a usage error."""
    try:
        return analysis.Limits(**analysis.Limits.parse(limit or []))
    except analysis.SettingSyntaxError as error:
        raise usage_error(error) from None


@dataclass(frozen=True)
class LogInputs:
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


def reading(
    inputs: Sequence[Path], *, field: list[str] | None, on_bad_record: BadRecordPolicy,
    trust_pickle: bool, order_by: str | None = None, quiet: bool = False,
    include_eval: bool = False, log_format: str | None = None,
    limit: list[str] | None = None,
) -> LogInputs:  # fmt: skip
    """What the shared options of a command that reads logs say."""
    options = read_options(
        field=field, on_bad_record=on_bad_record, trust_pickle=trust_pickle, order_by=order_by,
        include_eval=include_eval, log_format=log_format,
        limit=limit,
    )  # fmt: skip
    return LogInputs(inputs, options, order_by, quiet)


MaxRetries = Annotated[
    int | None,
    typer.Option(
        "--max-retries",
        help="A run folder's DRESSAGE_ROLLOUT_MAX_RETRIES (default: read from its files).",
        min=0,
        metavar=INT,
        show_default=False,
    ),
]
"""The retry limit of a run folder's own loop (replay RUN, verify RUN)."""
