"""The replay: prepare a loaded log once, then replay Dressage's staleness controls for one
setting (:func:`replay`) or a grid of them (:func:`sweep`)."""

from __future__ import annotations

from analysis.engine.config import DECISIONS, MAX_SETTING, ReplayConfig
from analysis.engine.grid import (
    PARETO_NOTE,
    SweepResult,
    ValueListError,
    parse_keep_versions,
    parse_max_preempts,
    parse_one_keep_versions,
    parse_one_max_preempts,
    parse_whole,
    sweep,
)
from analysis.engine.loop import (
    LOOP_DECISIONS,
    TRAJECTORY_TABLE_COLUMNS,
    LoopReplay,
    replay_run,
)
from analysis.engine.loop_inference import keep_versions_reproducing
from analysis.engine.prepare import REPLAY_COLUMNS, PreparedLog, prepare, real_token_labels
from analysis.engine.results import ReplayResult, replay, replay_many, trajectory_outcomes
from analysis.engine.summary import ReplaySummary

__all__ = [
    "DECISIONS",
    "LOOP_DECISIONS",
    "MAX_SETTING",
    "PARETO_NOTE",
    "REPLAY_COLUMNS",
    "TRAJECTORY_TABLE_COLUMNS",
    "LoopReplay",
    "PreparedLog",
    "ReplayConfig",
    "ReplayResult",
    "ReplaySummary",
    "SweepResult",
    "ValueListError",
    "keep_versions_reproducing",
    "parse_keep_versions",
    "parse_max_preempts",
    "parse_one_keep_versions",
    "parse_one_max_preempts",
    "parse_whole",
    "prepare",
    "real_token_labels",
    "replay",
    "replay_many",
    "replay_run",
    "sweep",
    "trajectory_outcomes",
]
