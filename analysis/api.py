"""The one entry point that picks the engine: any input (paths of logs, a Dressage run
folder, a loaded table or a prepared log) and any rule (a :class:`ReplayConfig` or a
policy), replayed on the engine that fits, with a result that says which it ran.

- a policy when one is given: every policy on the simple loop (docs/semantics.md §13.7);
- a Dressage run folder given alone, with no ``log_format``: Dressage's own collector loop
  (docs/semantics.md §12), K as given, M and B the run's own;
- anything else: the simple loop, group by group (docs/semantics.md §3).

``dressage-replay replay`` is this function and a renderer: a notebook calling
``analysis.replay(RUN_FOLDER, ReplayConfig(keep_versions=2))`` gets what the command prints.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from enum import StrEnum
from os import PathLike
from pathlib import Path
from typing import Any, Literal, overload

import polars as pl

from analysis.engine import REPLAY_COLUMNS, PreparedLog, prepare
from analysis.engine.batch_size import batch_groups_for
from analysis.engine.config import ReplayConfig
from analysis.engine.results import ReplayResult, replay as replay_table
from analysis.engine.run_loop.replay import LoopReplay, replay_what_if
from analysis.errors import ConfigError, Message, setting
from analysis.formats.dressage.run import RunLog, is_run_folder, read_run
from analysis.formats.load import load_logs
from analysis.formats.load_report import LoadReport
from analysis.output.result_writers import (
    decisions_in_order,
    trajectory_table,
    write_frame_to,
)
from analysis.rules.policies import (
    Policy,
    PolicyResult,
    replay_policy,
)
from analysis.rules.spec import parse_policy
from analysis.table.options import ReadOptions
from analysis.views.bias import BiasReport, who_gets_dropped

Progress = Callable[[str], AbstractContextManager[Callable[[int, int], None] | None]]
"""A factory of progress bars by what is under way (``"reading"``): each a context that
gives ``update(done, total)`` (or None for none)."""

Source = str | PathLike[str] | Sequence[str | PathLike[str]]
"""Paths of logs, or of one Dressage run folder."""


class Engine(StrEnum):
    """Which replay ran."""

    SIMPLE_LOOP = "simple-loop"
    """Groups replayed one by one in arrival order (docs/semantics.md §3)."""
    RUN_LOOP = "dressage-loop"
    """A run folder replayed as Dressage's own collector loop (docs/semantics.md §12)."""
    POLICY = "policy"
    """A staleness policy, Dressage's or another system's, on the simple loop (§13)."""


RUN_LOOP_OWN: dict[str, str] = {
    "batch_groups": "the batch size is the run's own (its dressage_log.txt's target_groups)",
    "order_by": "groups arrive in the order the run's trajectories finished",
    "fields": "the run's own files are read, not records whose fields could be renamed",
    "bias": "who gets dropped is compared on the simple loop only",
    "on_bad_record": "a run folder is read whole, a bad file is an error and never skipped",
    "trust_pickle": "a run folder's dumps are always read by the safe reader",
    "include_eval": "evaluation dumps (eval_<N>.pt) are no steps of the loop",
}
"""Why each setting of the simple loop does not apply to a run folder replayed as
Dressage's loop."""
_SIMPLE_LOOP_ONLY = ("batch_groups", "order_by", "fields", "bias")
"""Those that apply when the folder's records are replayed on the simple loop instead."""


class NotUsedError(ConfigError):
    """Settings of the simple loop given for a run folder replayed as Dressage's loop."""

    def __init__(self, unused: Sequence[str]) -> None:
        self.unused = tuple(unused)
        why = Message()
        for i, name in enumerate(unused):
            why += ("; " if i else "") + setting(name) + ": " + RUN_LOOP_OWN[name]
        elsewhere = [setting(name) for name in unused if name in _SIMPLE_LOOP_ONLY]
        todo = Message(f"leave {'it' if len(unused) == 1 else 'them'} out")
        if elsewhere:
            listed = Message()
            for i, ref in enumerate(elsewhere):
                listed += (", " if i else "") + ref
            todo += (
                ", or add "
                + setting("log_format", "artifacts")
                + " to replay the folder's records on the simple loop, where "
                + listed
                + (" applies" if len(elsewhere) == 1 else " apply")
            )
        super().__init__(
            "not used when a run folder is replayed as Dressage's loop "
            "(docs/semantics.md §12): " + why + "; " + todo
        )


@dataclass(frozen=True)
class Replayed:
    """One replay, on the engine :func:`replay_log` picked: ``engine`` says which;
    ``result`` is that engine's own result."""

    engine: Engine
    result: ReplayResult | LoopReplay | PolicyResult
    inputs: tuple[Path, ...] = ()
    prepared: PreparedLog | None = None
    """The log as the simple loop replayed it (None for a run folder's own loop)."""
    report: LoadReport | None = None
    """What reading the logs skipped and warned of (None when nothing was read)."""
    bias: BiasReport | None = None
    """Who gets dropped (when asked for, on the simple loop)."""
    notes: tuple[str, ...] = ()
    """Where a setting came from or why one was not applied."""

    @property
    def warnings(self) -> list[str]:
        """What reading or replaying warned of."""
        if isinstance(self.result, LoopReplay):
            return list(self.result.warnings)
        return list(self.report.warnings) if self.report is not None else []

    def to_dict(self) -> dict[str, Any]:
        """The figures, as ``dressage-replay replay --json`` prints them."""
        if isinstance(self.result, LoopReplay):
            return {"engine": Engine.RUN_LOOP.value, **self.result.to_dict()}
        # a policy runs on the simple loop too (docs/semantics.md §13.7)
        figures: dict[str, Any] = {"engine": Engine.SIMPLE_LOOP.value}
        figures |= (
            self.result.to_dict()
            if isinstance(self.result, PolicyResult)
            else self.result.summary.to_dict()
        )
        if self.bias is not None:
            figures["bias"] = self.bias.to_dict()
        if self.report is not None and self.report.skipped:
            figures["skipped"] = {
                "by_reason": dict(self.report.skipped),
                "first": self.report.skipped_where,
            }
        return figures

    def decision_frame(self) -> pl.DataFrame:
        """One row per group (per attempt, on a run's own loop), as ``write`` writes it."""
        if isinstance(self.result, LoopReplay):
            return self.result.decision_table()
        return decisions_in_order(self.result.decisions)

    def trajectory_frame(self) -> pl.DataFrame:
        """One row per trajectory, as ``write`` writes it."""
        if isinstance(self.result, LoopReplay):
            return self.result.trajectory_table()
        assert self.prepared is not None  # the simple loop's
        engine_result = self.result.result if isinstance(self.result, PolicyResult) else self.result
        return trajectory_table(self.prepared, engine_result)

    def write(
        self, *, decisions: Path | None = None, trajectories: Path | None = None
    ) -> Iterator[Path]:
        """Write the decision and trajectory tables (by extension); each path once written."""
        tables = ((self.decision_frame, decisions), (self.trajectory_frame, trajectories))
        for table, path in tables:
            if path is not None:
                write_frame_to(table(), path, inputs=self.inputs)
                yield path


def paths_of(source: Source) -> tuple[Path, ...]:
    if isinstance(source, str | PathLike):
        return (Path(source),)
    return tuple(Path(path) for path in source)


def picks_run_loop(inputs: Sequence[Path], options: ReadOptions) -> bool:
    """Whether :func:`replay_log` replays these inputs as Dressage's own loop: one run
    folder, read as no other format."""
    return options.log_format is None and len(inputs) == 1 and is_run_folder(inputs[0])


def replay_log(
    source: Source | pl.DataFrame | PreparedLog,
    config: ReplayConfig | None = None,
    *,
    policy: Policy | str | None = None,
    options: ReadOptions | None = None,
    order_by: str | None = None,
    bias: bool = False,
    progress: Progress | None = None,
    note: Callable[[str], None] | None = None,
    max_retries: int | None = None,
    loop: Literal["partial", "fully"] | None = None,
) -> Replayed:
    """Replay ``source`` under ``config`` or ``policy`` on the engine that fits (see the
    module's docstring); ``options`` say how to read paths; ``bias`` also compares who
    gets dropped; ``note`` hears each note as it arises (they are also in the result);
    ``max_retries`` is a run folder's retry limit (default: as its files say).
    ``loop`` is the Dressage loop of a run folder (None: the one its files tell).

    Settings of the simple loop that a run folder's own loop cannot apply are refused
    with :class:`NotUsedError`; ``max_preempts`` is noted as not applied (the run's own
    M is on disk)."""
    config = config if config is not None else ReplayConfig()
    options = options if options is not None else ReadOptions()
    if order_by and order_by not in options.extra_fields:
        options = ReadOptions.of(options, extra_fields=(*options.extra_fields, order_by))
    bars: Progress = progress or (lambda _: nullcontext(None))
    notes: list[str] = []

    def said(text: str) -> None:
        notes.append(text)
        if note is not None:
            note(text)

    if isinstance(policy, str):
        policy = parse_policy(policy)
    if policy is not None and (config.keep_versions != 0 or config.max_preempts is not None):
        raise ConfigError(
            "give K and M inside the policy (dressage:k=K,m=M), not in "
            + setting("keep_versions")
            + " and "
            + setting("max_preempts")
        )
    inputs: tuple[Path, ...] = ()
    table: pl.DataFrame | None = None
    report: LoadReport | None = None
    if isinstance(source, PreparedLog):
        prepared, batch_groups = source, config.batch_groups
    elif isinstance(source, pl.DataFrame):
        table, batch_groups = source, config.batch_groups
        prepared = prepare(source, order_by=order_by)
    else:
        inputs = paths_of(source)
        if loop is not None and not (policy is None and picks_run_loop(inputs, options)):
            raise ConfigError(
                setting("loop")
                + " applies to a Dressage run folder replayed as its own loop; leave it out"
            )
        if policy is None and picks_run_loop(inputs, options):
            return _replay_run_folder(
                inputs[0],
                config,
                options,
                order_by,
                bias,
                said,
                notes,
                max_retries=max_retries,
                loop=loop,
            )
        if max_retries is not None:
            raise ConfigError(
                setting("max_retries")
                + " is Dressage's retry limit in a run folder's own loop; this input is "
                "replayed on the simple loop, which does not retry: leave it out"
            )
        log = load_log(
            inputs, options=options, order_by=order_by, batch_groups=config.batch_groups,
            whole_table=bias, progress=bars, note=said,
        )  # fmt: skip
        table, prepared, report, batch_groups = (
            log.table,
            log.prepared,
            log.report,
            log.batch_groups,
        )
    if policy is not None:
        result: ReplayResult | PolicyResult = replay_policy(
            prepared, policy, batch_groups=batch_groups, formats=log_formats(report)
        )
        engine = Engine.POLICY
    else:
        result = replay_table(prepared, dataclasses.replace(config, batch_groups=batch_groups))
        engine = Engine.SIMPLE_LOOP
    dropped = _who_gets_dropped(prepared, result, table) if bias else None
    return Replayed(engine, result, inputs, prepared, report, dropped, tuple(notes))


def _who_gets_dropped(
    prepared: PreparedLog, result: ReplayResult | PolicyResult, table: pl.DataFrame | None
) -> BiasReport:
    if table is None:
        raise ConfigError(setting("bias") + " needs the table, not a prepared log")
    engine_result = result.result if isinstance(result, PolicyResult) else result
    return who_gets_dropped(prepared, engine_result, table=table)


def log_formats(report: LoadReport | None) -> tuple[str, ...]:
    """The formats a log was read from (a converted log: its source's), for the rules that
    read a system's own log (docs/semantics.md §13.2)."""
    return () if report is None else (*report.formats, *report.converted_from)


@dataclass(frozen=True)
class LoadedLog:
    """Logs read and prepared once for the simple loop, with the batch size they replay at."""

    inputs: tuple[Path, ...]
    table: pl.DataFrame
    """The canonical table (only the replay's columns unless the whole was asked for)."""
    prepared: PreparedLog
    report: LoadReport
    batch_groups: int | None
    """B as given; else a run folder's own; None when the log's trainer steps tell it."""

    def __repr__(self) -> str:
        names = ", ".join(path.name for path in self.inputs[:3])  # (a table's head: below)
        size = f"{self.table.height:,} records, {self.prepared.n_groups:,} groups"
        return f"LoadedLog({names}: {size}, batch_groups={self.batch_groups})"

    def _repr_html_(self) -> str:
        return f"<p>{html.escape(repr(self))}</p>{self.table.head(10)._repr_html_()}"


def load_log(
    source: Source,
    *,
    options: ReadOptions | None = None,
    order_by: str | None = None,
    batch_groups: int | None = None,
    whole_table: bool = False,
    progress: Progress | None = None,
    note: Callable[[str], None] | None = None,
) -> LoadedLog:
    """Read and prepare logs once for any number of replays on the simple loop, and
    choose their batch size (:func:`analysis.batch_groups_for`; where it came from is said
    to ``note``)."""
    inputs = paths_of(source)
    options = options if options is not None else ReadOptions()
    if order_by and order_by not in options.extra_fields:
        options = ReadOptions.of(options, extra_fields=(*options.extra_fields, order_by))
    bars: Progress = progress or (lambda _: nullcontext(None))
    report = LoadReport()
    with bars("reading") as update:
        table = load_logs(
            inputs,
            options,
            report=report,
            progress=update,
            columns=None if whole_table else REPLAY_COLUMNS,
        )
    prepared = prepare(table, order_by=order_by)
    report.warnings += prepared.warnings
    found = batch_groups_for(inputs, batch_groups, prepared, report, limits=options.limits)
    if found.note is not None and note is not None:
        note(found.note)
    return LoadedLog(inputs, table, prepared, report, found.batch_groups)


def read_run_folder(
    folder: Path,
    options: ReadOptions,
    *,
    batch_groups: int | None = None,
    order_by: str | None = None,
    bias: bool = False,
) -> RunLog:
    """A run folder read for its own loop, within the options' limits; settings of the
    simple loop that its loop cannot apply are refused (:class:`NotUsedError`)."""
    default = ReadOptions()  # a library call has no parser: an option is given when it differs
    given = {
        "batch_groups": batch_groups is not None,
        "order_by": bool(order_by),
        "bias": bias,
        **{
            name: getattr(options, name) != getattr(default, name)
            for name in ("fields", "on_bad_record", "trust_pickle", "include_eval")
        },
    }
    if unused := [name for name, is_given in given.items() if is_given]:
        raise NotUsedError(unused)
    return read_run(folder, limits=options.limits)


def _replay_run_folder(
    folder: Path,
    config: ReplayConfig,
    options: ReadOptions,
    order_by: str | None,
    bias: bool,
    said: Callable[[str], None],
    notes: list[str],
    *,
    max_retries: int | None = None,
    loop: Literal["partial", "fully"] | None = None,
) -> Replayed:
    """A run folder, replayed as Dressage's collector loop: K as given; M and B are the
    run's own (its span rejections are on disk, its batch size in its log); its files
    are read within the options' limits."""
    run = read_run_folder(
        folder, options, batch_groups=config.batch_groups, order_by=order_by, bias=bias
    )
    if config.max_preempts is not None:
        said(
            setting("max_preempts", config.max_preempts) + " is not applied: a run folder is "
            "replayed with the run's own M (its span rejections are on disk, in traj_err/)"
        )
    result = replay_what_if(
        run,
        keep_versions=config.keep_versions,
        max_retries=max_retries,
        loop=loop,
    )
    return Replayed(Engine.RUN_LOOP, result, (folder,), notes=tuple(notes))


@overload
def replay(
    source: pl.DataFrame | PreparedLog, config: ReplayConfig, *, order_by: str | None = None
) -> ReplayResult: ...


@overload
def replay(
    source: Source,
    config: ReplayConfig | None = None,
    *,
    policy: Policy | str | None = None,
    options: ReadOptions | None = None,
    order_by: str | None = None,
    bias: bool = False,
    progress: Progress | None = None,
    note: Callable[[str], None] | None = None,
    max_retries: int | None = None,
    loop: Literal["partial", "fully"] | None = None,
) -> Replayed: ...


def replay(
    source: Source | pl.DataFrame | PreparedLog,
    config: ReplayConfig | None = None,
    **settings: Any,
) -> ReplayResult | Replayed:
    """Replay one setting: a loaded table or prepared log under ``config`` on the simple
    loop, giving its :class:`ReplayResult`; paths of logs or of a run folder through
    :func:`replay_log`, which picks the engine and says which it ran.

    Examples
    --------
    >>> import analysis
    >>> table = analysis.records_to_table(list(analysis.simulate(analysis.SimulationConfig(n_groups=8))))
    >>> setting = analysis.ReplayConfig(keep_versions=1)
    >>> type(analysis.replay(table, setting)).__name__
    'ReplayResult'
    >>> analysis.replay_log(table, setting).engine
    <Engine.SIMPLE_LOOP: 'simple-loop'>
    """
    if _is_loaded(source) and config is not None and not settings.keys() - {"order_by"}:
        return replay_table(source, config, **settings)  # type: ignore[arg-type]
    return replay_log(source, config, **settings)


def _is_loaded(source: object) -> bool:
    """A table or a prepared log, not paths."""
    return isinstance(source, PreparedLog | pl.DataFrame)
