"""Two logs (or two settings) compared: each replayed under its own setting, the results
lined up as a :class:`~analysis.views.comparison.CompareResult`, which
:func:`analysis.views.comparison.plot_compare` draws. :func:`compare_inputs` starts from
paths, as ``dressage-replay compare`` does: each side's batch size is chosen here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import polars as pl

from analysis.engine import (
    PreparedLog,
    ReplayConfig,
    ReplaySummary,
    prepare,
    replay,
    trajectory_outcomes,
)
from analysis.engine.batch_size import batch_groups_for
from analysis.engine.decisions import Decision
from analysis.engine.run_loop.replay import replay_what_if
from analysis.engine.run_loop.sweep import LoopSetting, setting_of
from analysis.errors import ConfigError, setting
from analysis.formats.dressage.run import is_run_folder, read_run
from analysis.formats.load import load_logs
from analysis.formats.load_report import LoadReport
from analysis.formats.slime_dumps.train_dumps import (
    TrainDumps,
    join_train_log_probs,
    read_train_dumps,
)
from analysis.table.options import ReadOptions
from analysis.views.comparison import (
    DRIFT_SCHEMA,
    GAP_SCHEMA,
    METRICS,
    SPAN_SCHEMA,
    CompareResult,
)


def compare_logs(
    a: PreparedLog | pl.DataFrame | LoopSetting,
    b: PreparedLog | pl.DataFrame | LoopSetting,
    *,
    config_a: ReplayConfig,
    config_b: ReplayConfig,
    names: tuple[str, str] = ("A", "B"),
    order_by: str | None = None,
    train_dumps: tuple[TrainDumps | None, TrainDumps | None] = (None, None),
) -> CompareResult:
    """Replay log ``a`` under ``config_a`` and ``b`` under ``config_b`` and compare them.

    Each log is a canonical table (from ``load_logs`` / ``records_to_table``) or a
    :class:`PreparedLog`, replayed on the simple loop, or a run folder already replayed on
    Dressage's own loop (a :class:`LoopSetting`; its config is ignored, and it has no
    drift figures). Log-prob drift needs the per-record ``log_prob_drift`` column,
    which only a table has: for a :class:`PreparedLog` that run's drift is left out and
    a note says so.

    Drift by gap is measured over all data, not only what the setting keeps, because a
    setting's drops remove exactly the large gaps whose drift is in question: each
    record's gap is its trajectory's ``version_gap`` in a replay with both controls off
    (``keep_versions=0``, ``max_preempts=None``, the run's ``batch_groups``). Records
    of failed groups, of trajectories without a version, or without a trajectory id
    have no gap and are left out; a gap's figure is the mean of the records'
    ``log_prob_drift`` weighted by their ``log_prob_tokens``.

    ``train_dumps`` gives each log's train-side dumps (:func:`analysis.read_train_dumps`),
    when its records carry only the rollout's log-probs (plain slime): a record's drift is
    then its trained sample's, joined on (trainer step = ``rollout_id``, ``index`` =
    ``sample_index``); what cannot be joined is said in a note.

    Examples
    --------
    >>> import analysis
    >>> table = analysis.records_to_table(list(analysis.simulate(
    ...     analysis.SimulationConfig(n_groups=8, log_prob_drift=0.05))))
    >>> setting = analysis.ReplayConfig(keep_versions=1)
    >>> result = analysis.compare_logs(table, table, config_a=setting, config_b=setting)
    >>> result.table.columns
    ['metric', 'A', 'B']
    """
    names = _check_names(names)
    tables, notes = _with_train_log_probs((a, b), train_dumps, names)
    prepared = tuple(
        log if isinstance(log, PreparedLog | LoopSetting) else prepare(log, order_by=order_by)
        for log in tables
    )
    results = tuple(
        ready if isinstance(ready, LoopSetting) else replay(ready, config)
        for ready, config in zip(prepared, (config_a, config_b), strict=True)
    )
    gaps, spans, drifts = [], [], []
    without: list[str] = []  # runs given as tables whose records carry no log-probs
    for name, log, ready, result in zip(names, tables, prepared, results, strict=True):
        outcomes = (
            result.replay.trajectories
            if isinstance(result, LoopSetting)
            else trajectory_outcomes(ready, result)  # type: ignore[arg-type]
        )
        gaps.append(_distribution(outcomes, "version_gap", name, GAP_SCHEMA))
        spans.append(_distribution(outcomes, "span", name, SPAN_SCHEMA))
        if isinstance(result, LoopSetting):
            notes.append(
                f"run {name} is a run folder replayed on Dressage's {result.replay.loop} loop "
                "(docs/semantics.md §12): its records carry no log-probs, so no drift by gap"
            )
        elif isinstance(log, pl.DataFrame) and isinstance(ready, PreparedLog):
            drifts.append(drift := _drift_by_gap(log, ready, result.config, name))
            if drift.height == 0:
                without.append(name)
        else:
            notes.append(
                f"run {name} was given as a PreparedLog, which keeps no per-record log-probs, "
                "so it has no drift figures; pass the canonical table instead"
            )
    if without:
        # Said, so that a run's missing drift figures are not read as "no drift".
        shown = [drift["run"][0] for drift in drifts if drift.height]
        notes.append(
            f"run {without[0]} has no records with both rollout_log_probs and log_probs: "
            + (f"drift by gap is shown for run {shown[0]} only" if shown else "no drift by gap")
            if len(without) == 1
            else "neither run has records with both rollout_log_probs and log_probs: "
            "no drift by gap"
        )
    figures = [
        _run_metrics(result) if isinstance(result, LoopSetting) else _metrics(result.summary)
        for result in results
    ]
    table = pl.DataFrame(
        {
            "metric": list(METRICS),
            **{
                name: pl.Series([run[metric] for metric in METRICS], dtype=pl.Float64)
                for name, run in zip(names, figures, strict=True)
            },
        }
    )
    return CompareResult(
        names=names,
        results=(results[0], results[1]),
        table=table,
        gap_distribution=pl.concat(gaps),
        span_distribution=pl.concat(spans),
        drift_by_gap=pl.concat(drifts) if drifts else pl.DataFrame(schema=DRIFT_SCHEMA),
        notes=tuple(notes),
    )


def _with_train_log_probs(
    logs: tuple[PreparedLog | pl.DataFrame | LoopSetting, PreparedLog | pl.DataFrame | LoopSetting],
    train_dumps: tuple[TrainDumps | None, TrainDumps | None],
    names: tuple[str, str],
) -> tuple[tuple[PreparedLog | pl.DataFrame | LoopSetting, ...], list[str]]:
    """Each log with its records' drift taken from its train dumps, where given."""
    joined: list[PreparedLog | pl.DataFrame | LoopSetting] = []
    notes: list[str] = []
    for name, log, train in zip(names, logs, train_dumps, strict=True):
        if train is not None and isinstance(log, pl.DataFrame):
            log, said = join_train_log_probs(log, train, name=f"run {name}")
            notes += said
        elif train is not None:
            raise ConfigError(
                f"run {name}: train dumps need the canonical table, not a PreparedLog "
                "(the join is on each record's trainer step and index)"
            )
        joined.append(log)
    return tuple(joined), notes


def _run_side(
    folder: Path, config: ReplayConfig, options: ReadOptions, note: Callable[[str], None] | None
) -> LoopSetting:
    """One side of a comparison that is a run folder: replayed on Dressage's own loop."""
    if config.batch_groups is not None:
        raise ConfigError(
            f"{folder}: a run folder is replayed as Dressage's loop with the run's own batch "
            "size (docs/semantics.md §12): leave out "
            + setting("batch_groups")
            + ", or add "
            + setting("log_format", "artifacts")
            + " to replay its records on the simple loop"
        )
    if config.max_preempts is not None and note is not None:
        note(
            str(folder)
            + ": "
            + setting("max_preempts", config.max_preempts)
            + " is not applied: a run folder is replayed with the run's own M (its span "
            "rejections are on disk, in traj_err/)"
        )
    run = read_run(folder, limits=options.limits)
    return setting_of(run, replay_what_if(run, keep_versions=config.keep_versions))


def _check_names(names: tuple[str, str]) -> tuple[str, str]:
    """Two distinct, non-empty run names that are not the ``metric`` column's."""
    if len(names) != 2 or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"require two non-empty run names (found {names!r})")
    if names[0] == names[1] or "metric" in names:
        raise ConfigError(
            f"require two distinct run names other than 'metric' (found {names!r}); "
            "name the runs apart, e.g. ('fast', 'slow')"
        )
    return names[0], names[1]


def _metrics(summary: ReplaySummary) -> dict[str, float | None]:
    """The table's figures for one replay, straight from its summary."""
    figures: dict[str, float | None] = {
        "versions observed": float(len(summary.versions)),
        "groups total": _number(summary.counts["groups"]["total"]),
        "version gap min (versions)": _number(summary.version_gap["min"]),
        "version gap mean (versions)": _number(summary.version_gap["mean"]),
        "version gap max (versions)": _number(summary.version_gap["max"]),
        "version span mean (versions)": _number(summary.version_span["kept"]["mean"]),
        "version span max (versions)": _number(summary.version_span["kept"]["max"]),
    }
    for unit in ("groups", "samples", "tokens"):
        counts = summary.counts[unit]
        # A null total (token figures unknown) or an empty log has no percentages.
        total = counts["total"]
        lost = sum(
            counts[key] or 0
            for key in (Decision.DROPPED_STALE, Decision.REJECTED_SPAN, Decision.FAILED)
        )
        figures[f"{unit} kept (%)"] = 100 * (counts[Decision.KEPT] or 0) / total if total else None
        figures[f"{unit} lost (%)"] = 100 * lost / total if total else None
    return figures


def _run_metrics(setting: LoopSetting) -> dict[str, float | None]:
    """The table's figures for a run folder's replay on its own loop, as its sweep row
    counts them (docs/semantics.md §12.7)."""
    row = setting.figures()
    kept = setting.replay.trajectories.filter(pl.col("decision") == Decision.KEPT)
    lost = ("dropped_stale_pct", "rejected_span_pct", "failed_pct")
    figures: dict[str, float | None] = {
        "versions observed": float(len(setting.replay.versions)),
        "groups total": float(setting.replay.attempts.height),
        "version gap min (versions)": _number(kept["version_gap"].min()),
        "version gap mean (versions)": _number(row["version_gap_mean"]),
        "version gap max (versions)": _number(row["version_gap_max"]),
        "version span mean (versions)": _number(row["version_span_mean"]),
        "version span max (versions)": _number(row["version_span_max"]),
    }
    for unit in ("groups", "samples", "tokens"):
        figures[f"{unit} kept (%)"] = row[f"{unit}_kept_pct"]
    figures["groups lost (%)"] = sum(row[key] or 0.0 for key in lost)
    trajectories = setting.replay.trajectories.join(
        setting.segments, on="trajectory_id", how="left"
    )
    gone = trajectories["decision"].is_in(
        [Decision.DROPPED_STALE, Decision.REJECTED_SPAN, Decision.FAILED]
    )
    for unit, column in (("samples", "segments"), ("tokens", "response_tokens")):
        values = trajectories[column].fill_null(1 if unit == "samples" else 0).cast(pl.Float64)
        total = float(values.sum())
        figures[f"{unit} lost (%)"] = (
            100.0 * float(values.filter(gone).sum()) / total if total else None
        )
    return figures


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _distribution(
    outcomes: pl.DataFrame, column: str, name: str, schema: dict[str, pl.DataType]
) -> pl.DataFrame:
    """Kept trajectories per value of ``column`` and their share of the run's total."""
    kept = outcomes.filter((pl.col("decision") == Decision.KEPT) & pl.col(column).is_not_null())
    return (
        kept.group_by(column)
        .agg(trajectories=pl.len())
        .sort(column)
        .select(
            run=pl.lit(name),
            **{column: pl.col(column)},
            trajectories=pl.col("trajectories"),
            share=pl.col("trajectories") / pl.col("trajectories").sum(),
        )
        .cast(schema)  # type: ignore[arg-type]
    )


def _drift_by_gap(
    table: pl.DataFrame, prepared: PreparedLog, config: ReplayConfig, name: str
) -> pl.DataFrame:
    """Token-weighted mean |rollout - trainer| log-prob per version gap, over all data."""
    if "log_prob_drift" not in table.columns or "log_prob_tokens" not in table.columns:
        return pl.DataFrame(schema=DRIFT_SCHEMA)
    records = table.filter(
        pl.col("log_prob_drift").is_not_null()
        & (pl.col("log_prob_tokens") > 0)
        & pl.col("trajectory_id").is_not_null()
    ).select("group_id", "trajectory_id", "log_prob_drift", "log_prob_tokens")
    if records.height == 0:
        return pl.DataFrame(schema=DRIFT_SCHEMA)
    unfiltered = replay(
        prepared, ReplayConfig(keep_versions=0, max_preempts=None, batch_groups=config.batch_groups)
    )
    gaps = (
        trajectory_outcomes(prepared, unfiltered)
        .filter(pl.col("version_gap").is_not_null() & pl.col("trajectory_id").is_not_null())
        .select("group_id", "trajectory_id", "version_gap")
    )
    return (
        records.join(gaps, on=["group_id", "trajectory_id"], how="inner")
        .group_by("version_gap")
        .agg(
            records=pl.len(),
            mean_abs_log_prob_diff=(pl.col("log_prob_drift") * pl.col("log_prob_tokens")).sum()
            / pl.col("log_prob_tokens").sum(),
        )
        .sort("version_gap")
        .select(pl.lit(name).alias("run"), pl.all())
        .cast(DRIFT_SCHEMA)  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class ComparedLogs:
    """Two logs read and compared: the comparison, and what reading each skipped or warned."""

    result: CompareResult
    reports: tuple[LoadReport, LoadReport]


Progress = Callable[[str], AbstractContextManager[Callable[[int, int], None] | None]]


def compare_inputs(
    first: str | PathLike[str],
    second: str | PathLike[str],
    config: ReplayConfig,
    *,
    names: tuple[str, str] = ("A", "B"),
    train_dumps: Sequence[str | PathLike[str]] = (),
    options: ReadOptions | None = None,
    progress: Progress | None = None,
    note: Callable[[str], None] | None = None,
) -> ComparedLogs:
    """Read two logs and compare them under ``config``: each side's B as given, else its
    own (its trainer steps', or its run folder's: :func:`analysis.batch_groups_for`, where
    it came from said to ``note``); ``train_dumps`` are the first log's, then the second's
    (:func:`analysis.read_train_dumps`), read within the same options. A Dressage run folder
    (no ``log_format``) is replayed on its own loop at ``config``'s K, as ``replay RUN``
    does (its own M and B: ``max_preempts`` is noted as not applied to it)."""
    options = options if options is not None else ReadOptions()
    bars: Progress = progress or (lambda _: nullcontext(None))
    if len(train_dumps) > 2:
        raise ConfigError("give train dumps at most twice, once per log")
    paths = (Path(first), Path(second))
    loaded: list[tuple[pl.DataFrame | LoopSetting, LoadReport]] = []
    for path in paths:
        report = LoadReport()
        if options.log_format is None and is_run_folder(path):
            loaded.append((_run_side(path, config, options, note), report))
            continue
        with bars("reading") as update:
            loaded.append((load_logs([path], options, report=report, progress=update), report))
    configs = []
    for path, (table, report) in zip(paths, loaded, strict=True):
        if isinstance(table, LoopSetting):
            configs.append(table.config)
            continue
        if config.batch_groups is not None:
            configs.append(config)
            continue
        found = batch_groups_for([path], None, prepare(table), report, limits=options.limits)
        if found.note is not None and note is not None:
            note(found.note)
        configs.append(dataclasses.replace(config, batch_groups=found.batch_groups))
    read = [
        read_train_dumps([Path(path)], trust_pickle=options.trust_pickle, limits=options.limits)
        for path in train_dumps
    ]
    result = compare_logs(
        loaded[0][0], loaded[1][0], config_a=configs[0], config_b=configs[1], names=names,
        train_dumps=(read[0] if read else None, read[1] if len(read) > 1 else None),
    )  # fmt: skip
    return ComparedLogs(result, (loaded[0][1], loaded[1][1]))
