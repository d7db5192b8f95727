"""Option groups: options that several commands share, declared once as a typed group
that a command receives as one value, built once, knowing which options were given (from
the parser, not by comparing with defaults)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

import analysis
from cli.options import (
    BadRecordPolicy,
    BatchGroups,
    DrawsOption,
    FieldOption,
    IncludeEval,
    KeepVersionsList,
    LimitOption,
    LogFormatOption,
    LogInputs,
    LoopOption,
    MaxPreemptsList,
    MaxRetries,
    OnBadRecord,
    OrderBy,
    Quiet,
    SeedOption,
    Traceback,
    TrustPickle,
    Verbose,
    WhatIfOption,
    parse_grid,
    reading,
)


@dataclass(frozen=True)
class ReadFlags:
    """The options every command that reads logs shares, declared once (see
    :func:`reads_logs`) and given to the command as this one value, built once."""

    field: list[str] | None = None
    on_bad_record: BadRecordPolicy = BadRecordPolicy.fail
    trust_pickle: bool = False
    limit: list[str] | None = None
    include_eval: bool = False
    log_format: str | None = None
    quiet: bool = False
    verbose: bool = False
    traceback_: bool = False
    given: frozenset[str] = frozenset()
    """Every option of the command that was given on its command line (the parser says
    so: an option given as its default value is given)."""

    def reading(self, inputs: Sequence[Path], *, order_by: str | None = None) -> LogInputs:
        """The inputs, to be read as these options say."""
        return reading(
            inputs, field=self.field, on_bad_record=self.on_bad_record,
            trust_pickle=self.trust_pickle, order_by=order_by, quiet=self.quiet,
            include_eval=self.include_eval, log_format=self.log_format, limit=self.limit,
        )  # fmt: skip

    def options(self, *, order_by: str | None = None) -> analysis.ReadOptions:
        """The library's read options these give; a --field or --limit that does not
        parse is a usage error."""
        return self.reading((), order_by=order_by).options


_READ_OPTIONS = {
    "field": FieldOption,
    "on_bad_record": OnBadRecord,
    "trust_pickle": TrustPickle,
    "limit": LimitOption,
    "include_eval": IncludeEval,
    "log_format": LogFormatOption,
    "quiet": Quiet,
    "verbose": Verbose,
    "traceback_": Traceback,
}
"""The shared options as typer declares them (type with its ``typer.Option``), in the
order ``--help`` lists them; their defaults are :class:`ReadFlags`' own."""


Command = Callable[..., None]
Declared = dict[str, tuple[Any, Any]]
"""Options as typer declares them: name: (type with its ``typer.Option``, default)."""


def declared(group: type[Any], options: dict[str, Any]) -> Declared:
    """A group's options with the defaults its dataclass declares (declared once)."""
    defaults = {field.name: field.default for field in dataclasses.fields(group)}
    return {name: (kind, defaults[name]) for name, kind in options.items()}


def takes_group(
    parameter: str, group: Callable[..., Any], declared: Declared, *,
    placed: dict[str, str] | None = None,
) -> Callable[[Command], Command]:  # fmt: skip
    """A command's ``parameter`` (annotated with the group's class) becomes the ``declared``
    options, declared once: typer sees them in its place (``placed`` puts a command's own
    option after one of them, ``{"admission": "log_format"}``, so that --help keeps its
    order), and the command receives one ``group(**values, given=...)``, which also knows
    which of the command's options were given (from the parser:
    ``ctx.get_parameter_source``, never by comparing with defaults)."""

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        names = list(signature.parameters)
        own = [p for p in signature.parameters.values() if p.name != parameter]
        moved = placed or {}
        shared = [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=default
            )
            for name, (kind, default) in declared.items()
        ]
        for name, after in moved.items():
            at = next(i for i, p in enumerate(shared) if p.name == after)
            shared.insert(at + 1, next(p for p in own if p.name == name))
        kept = [p for p in own if p.name not in moved]
        at = sum(1 for name in names[: names.index(parameter)] if name not in moved)
        own_context = "ctx" in names  # the command asks for the context itself
        context = [] if own_context else [
            inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
        ]  # fmt: skip
        parameters = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in [*context, *kept[:at], *shared, *kept[at:]]
        ]

        @functools.wraps(command)
        def run(ctx: typer.Context, **values: Any) -> None:
            given = frozenset(
                name for name in ctx.params
                if (source := ctx.get_parameter_source(name)) is not None
                and source.name != "DEFAULT"
            )  # fmt: skip
            values[parameter] = group(**{name: values.pop(name) for name in declared}, given=given)
            command(**values, **({"ctx": ctx} if own_context else {}))

        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run

    return decorate


def reads_logs(*, placed: dict[str, str] | None = None) -> Callable[[Command], Command]:
    """A command's ``read: ReadFlags`` parameter becomes the shared read options
    (:func:`takes_group`)."""
    return takes_group("read", ReadFlags, declared(ReadFlags, _READ_OPTIONS), placed=placed)


READ = ReadFlags()
"""The default of a command's ``read`` parameter (:func:`reads_logs` replaces it)."""


@dataclass(frozen=True)
class RunFlags:
    """Settings that only a Dressage run folder's own loop reads, given to the command
    as this one value."""

    max_retries: int | None = None
    loop: str | None = None
    given: frozenset[str] = frozenset()


def takes_run_settings() -> Callable[[Command], Command]:
    """A command's ``run: RunFlags`` parameter becomes the run-loop options."""
    return takes_group(
        "run", RunFlags, declared(RunFlags, {"max_retries": MaxRetries, "loop": LoopOption})
    )


RUN = RunFlags()
"""The default of a command's ``run`` parameter (:func:`takes_run_settings` replaces it)."""


@dataclass(frozen=True)
class GridFlags:
    """The settings grid of sweep, plot and report (K and M lists, B, the arrival order),
    declared once (:data:`_GRID`) and given to the command as this one value."""

    keep_versions: str = "0..4"
    max_preempts: str = "none,0..3"
    batch_groups: int | None = None
    order_by: str | None = None
    what_if: str = "model"
    draws: int = 5
    seed: int = 0
    given: frozenset[str] = frozenset()

    def parse(self) -> tuple[list[int], list[int | None]]:
        """The K and M lists (:func:`parse_grid`)."""
        return parse_grid(self.keep_versions, self.max_preempts)

    def parse_for(
        self, inputs: Sequence[Path], options: analysis.ReadOptions
    ) -> tuple[list[int], list[int | None]]:
        """The K and M lists for these inputs: a run folder replayed on its own loop takes
        only the run's own M when -m is not given (its loop cannot apply another M; an
        empty list says so to the library)."""
        ks, ms = self.parse()
        if "max_preempts" not in self.given and analysis.picks_run_loop(inputs, options):
            return ks, []
        return ks, ms

    def model(self, run_loop: bool) -> dict[str, Any]:
        """The what-if options (``what_if``, ``draws``, ``seed``) for the library; a usage
        error when one is given for an input that is not a run folder on its own loop."""
        given = sorted({"what_if", "draws", "seed"} & self.given)
        if given and not run_loop:
            flag = "--" + given[0].replace("_", "-")
            raise typer.BadParameter(
                "applies to a Dressage run folder replayed on its own loop; leave it out",
                param_hint=flag,
            )
        if self.what_if not in ("model", "replay"):
            raise typer.BadParameter(
                f"expected model or replay (found {self.what_if!r})", param_hint="--what-if"
            )
        return {"what_if": self.what_if, "draws": self.draws, "seed": self.seed}

    @property
    def grid_given(self) -> bool:
        """Whether -k or -m was given (the parser says so)."""
        return bool({"keep_versions", "max_preempts"} & self.given)


_GRID = {
    "keep_versions": KeepVersionsList,
    "max_preempts": MaxPreemptsList,
    "batch_groups": BatchGroups,
    "order_by": OrderBy,
    "what_if": WhatIfOption,
    "draws": DrawsOption,
    "seed": SeedOption,
}
"""The grid options, in the order --help lists them; their defaults are :class:`GridFlags`'."""

GRID = GridFlags()
"""The default of a command's ``grid`` parameter (:func:`takes_grid` replaces it)."""


def takes_grid(*, placed: dict[str, str] | None = None) -> Callable[[Command], Command]:
    """A command's ``grid: GridFlags`` parameter becomes the grid options
    (:func:`takes_group`)."""
    return takes_group("grid", GridFlags, declared(GridFlags, _GRID), placed=placed)


def sweeps_logs(*, placed: dict[str, str] | None = None) -> Callable[[Command], Command]:
    """sweep, plot and report: the grid (``grid: GridFlags``) and the read options
    (``read: ReadFlags``), each declared once."""

    def decorate(command: Command) -> Command:
        return reads_logs()(takes_grid(placed=placed)(command))

    return decorate
