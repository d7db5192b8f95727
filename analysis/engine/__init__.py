"""The replay: prepare a loaded log once, then replay Dressage's staleness controls for one
setting (:func:`replay`) or a grid of them (:func:`sweep`)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Imported at once: the function ``prepare`` has the name of its module, which would
# otherwise hide it once the module is imported.
from analysis.engine.prepare import REPLAY_COLUMNS, PreparedLog, prepare, real_token_labels

if TYPE_CHECKING:  # the rest imported when first used
    from analysis.engine.config import MAX_SETTING, ReplayConfig
    from analysis.engine.decisions import DECISIONS, LOOP_DECISIONS, Decision, Outcome, Stage
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
    from analysis.engine.results import ReplayResult, replay, replay_many, trajectory_outcomes
    from analysis.engine.run_loop.replay import (
        TRAJECTORY_TABLE_COLUMNS,
        LoopReplay,
        keep_versions_reproducing,
        replay_run,
    )
    from analysis.engine.summary import ReplaySummary

_HOME: dict[str, str] = {
    "DECISIONS": "analysis.engine.decisions",
    "Decision": "analysis.engine.decisions",
    "LOOP_DECISIONS": "analysis.engine.decisions",
    "LoopReplay": "analysis.engine.run_loop.replay",
    "MAX_SETTING": "analysis.engine.config",
    "Outcome": "analysis.engine.decisions",
    "PARETO_NOTE": "analysis.engine.grid",
    "ReplayConfig": "analysis.engine.config",
    "ReplayResult": "analysis.engine.results",
    "ReplaySummary": "analysis.engine.summary",
    "Stage": "analysis.engine.decisions",
    "SweepResult": "analysis.engine.grid",
    "TRAJECTORY_TABLE_COLUMNS": "analysis.engine.run_loop.replay",
    "ValueListError": "analysis.engine.grid",
    "keep_versions_reproducing": "analysis.engine.run_loop.replay",
    "parse_keep_versions": "analysis.engine.grid",
    "parse_max_preempts": "analysis.engine.grid",
    "parse_one_keep_versions": "analysis.engine.grid",
    "parse_one_max_preempts": "analysis.engine.grid",
    "parse_whole": "analysis.engine.grid",
    "replay": "analysis.engine.results",
    "replay_many": "analysis.engine.results",
    "replay_run": "analysis.engine.run_loop.replay",
    "sweep": "analysis.engine.grid",
    "trajectory_outcomes": "analysis.engine.results",
}
"""The module each exported name lives in, imported on first use of the name."""

__all__ = [
    "DECISIONS",
    "LOOP_DECISIONS",
    "MAX_SETTING",
    "PARETO_NOTE",
    "REPLAY_COLUMNS",
    "TRAJECTORY_TABLE_COLUMNS",
    "Decision",
    "LoopReplay",
    "Outcome",
    "PreparedLog",
    "ReplayConfig",
    "ReplayResult",
    "ReplaySummary",
    "Stage",
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


def __getattr__(name: str) -> Any:
    """An exported name, imported from its module on first use (PEP 562)."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
