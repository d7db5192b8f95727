"""Writing a replay's results: decisions, trajectories, a run's tables and any frame, in
the format the path's extension names."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from analysis.output.atomic import atomic_path
from analysis.output.checks import FRAME_FORMATS, check_output, refuse_overwriting_inputs

if TYPE_CHECKING:
    from analysis.engine import LoopReplay, PreparedLog, ReplayResult


def write_frame(frame: pl.DataFrame, path: Path) -> None:
    """Write a frame as CSV, Parquet, Arrow IPC or JSON, chosen by the path's extension."""
    path = Path(path)
    check_output(path, FRAME_FORMATS)
    with atomic_path(path) as temp:
        getattr(frame, FRAME_FORMATS[path.suffix.lower()])(temp)


DECISION_COLUMNS = ("group_id", "decision", "stage", "batch", "version_index", "version_gap")


def write_decisions(result: ReplayResult, path: Path, *, inputs: Iterable[Path] = ()) -> None:
    """Write one row per group (CSV or Parquet by extension), the decision columns first."""
    refuse_overwriting_inputs(Path(path), inputs)
    write_frame(decisions_in_order(result.decisions), path)


def decisions_in_order(frame: pl.DataFrame) -> pl.DataFrame:
    """A decisions table with :data:`DECISION_COLUMNS` first, as it is written."""
    return frame.select(*DECISION_COLUMNS, pl.exclude(DECISION_COLUMNS))


def write_trajectories(
    prepared: PreparedLog, result: ReplayResult, path: Path, *, inputs: Iterable[Path] = ()
) -> None:
    """Write one row per trajectory of a replayed log, in the columns a run folder's replay
    writes too (:data:`analysis.engine.run_loop.replay.TRAJECTORY_TABLE_COLUMNS`)."""
    write_frame_to(trajectory_table(prepared, result), path, inputs=inputs)


def trajectory_table(prepared: PreparedLog, result: ReplayResult) -> pl.DataFrame:
    """One row per trajectory of a replayed log, as :func:`write_trajectories` writes it."""
    from analysis.engine import TRAJECTORY_TABLE_COLUMNS, trajectory_outcomes

    return trajectory_outcomes(prepared, result).select(TRAJECTORY_TABLE_COLUMNS)


def write_frame_to(frame: pl.DataFrame, path: Path, *, inputs: Iterable[Path] = ()) -> None:
    """Write a result frame by extension, refusing to overwrite an input."""
    refuse_overwriting_inputs(Path(path), inputs)
    write_frame(frame, path)


def write_run_tables(
    result: LoopReplay,
    *,
    decisions: Path | None = None,
    trajectories: Path | None = None,
    inputs: Iterable[Path] = (),
) -> list[Path]:
    """Write ``replay RUN``'s tables: one row per attempt to ``decisions``, one per
    trajectory to ``trajectories`` (format by extension); the paths written."""
    written = []
    for frame, path in (
        (result.decision_table, decisions),
        (result.trajectory_table, trajectories),
    ):
        if path is not None:
            write_frame_to(frame(), path, inputs=inputs)
            written.append(path)
    return written
