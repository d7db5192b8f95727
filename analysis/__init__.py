"""dressage-replay: offline staleness analysis and replay of async RL rollout logs.

Everything the command line does is here as plain functions returning values::

    import analysis
    table = analysis.load_logs(["runs/alfworld/"])
    result = analysis.replay(table, analysis.ReplayConfig(keep_versions=2, max_preempts=2))
    result.summary.to_dict()["groups"]
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when first used (a command line's start stays fast)
    from analysis.batch_size import BatchSize, batch_groups_for
    from analysis.engine import (
        LOOP_DECISIONS,
        REPLAY_COLUMNS,
        TRAJECTORY_TABLE_COLUMNS,
        LoopReplay,
        PreparedLog,
        ReplayConfig,
        ReplayResult,
        ReplaySummary,
        SweepResult,
        keep_versions_reproducing,
        parse_keep_versions,
        parse_max_preempts,
        prepare,
        replay,
        replay_many,
        replay_run,
        sweep,
        trajectory_outcomes,
    )
    from analysis.errors import (
        ConfigError,
        ExitCode,
        InputNotFoundError,
        LogFormatError,
        Message,
        MissingFieldError,
        OutputError,
        ReplayError,
        SettingSyntaxError,
        UnknownFormatError,
        UnsafePickleError,
    )
    from analysis.io.dressage_run import RunLog, is_run_folder, read_run
    from analysis.io.fields import FieldMap
    from analysis.io.limits import Limits
    from analysis.io.load import (
        LoadReport,
        iter_log_chunks,
        load_logs,
        records_to_table,
    )
    from analysis.io.options import ReadOptions
    from analysis.io.raw_writers import log_format_for, write_log
    from analysis.io.tables import (
        FRAME_FORMATS,
        check_output,
        convert_logs,
        refuse_overwriting_inputs,
        write_canonical,
        write_decisions,
        write_frame,
        write_frame_to,
        write_run_tables,
        write_trajectories,
    )
    from analysis.io.train_dumps import TrainDumps, read_train_dumps
    from analysis.labels import derive_end_version, real_label, run_length_spans
    from analysis.schema import CANONICAL_SCHEMA
    from analysis.simulator import SimulationConfig, simulate
    from analysis.views.admission import (
        AdmissionReport,
        AdmissionRule,
        admission_violations,
        parse_admission,
    )
    from analysis.views.bias import BiasReport, who_gets_dropped
    from analysis.views.comparison import CompareResult, compare_logs
    from analysis.views.inspection import LogInspection, inspect_log

_HOME: dict[str, str] = {
    "AdmissionReport": "analysis.views.admission",
    "AdmissionRule": "analysis.views.admission",
    "admission_violations": "analysis.views.admission",
    "parse_admission": "analysis.views.admission",
    "BiasReport": "analysis.views.bias",
    "CANONICAL_SCHEMA": "analysis.schema",
    "CompareResult": "analysis.views.comparison",
    "ConfigError": "analysis.errors",
    "ExitCode": "analysis.errors",
    "FRAME_FORMATS": "analysis.io.tables",
    "FieldMap": "analysis.io.fields",
    "InputNotFoundError": "analysis.errors",
    "Limits": "analysis.io.limits",
    "LOOP_DECISIONS": "analysis.engine",
    "LoadReport": "analysis.io.load",
    "LogFormatError": "analysis.errors",
    "LogInspection": "analysis.views.inspection",
    "LoopReplay": "analysis.engine",
    "Message": "analysis.errors",
    "MissingFieldError": "analysis.errors",
    "OutputError": "analysis.errors",
    "PreparedLog": "analysis.engine",
    "REPLAY_COLUMNS": "analysis.engine",
    "ReadOptions": "analysis.io.options",
    "ReplayConfig": "analysis.engine",
    "ReplayError": "analysis.errors",
    "ReplayResult": "analysis.engine",
    "ReplaySummary": "analysis.engine",
    "RunLog": "analysis.io.dressage_run",
    "SettingSyntaxError": "analysis.errors",
    "SimulationConfig": "analysis.simulator",
    "SweepResult": "analysis.engine",
    "TRAJECTORY_TABLE_COLUMNS": "analysis.engine",
    "TrainDumps": "analysis.io.train_dumps",
    "UnknownFormatError": "analysis.errors",
    "UnsafePickleError": "analysis.errors",
    "batch_groups_for": "analysis.batch_size",
    "BatchSize": "analysis.batch_size",
    "check_output": "analysis.io.tables",
    "compare_logs": "analysis.views.comparison",
    "convert_logs": "analysis.io.tables",
    "derive_end_version": "analysis.labels",
    "inspect_log": "analysis.views.inspection",
    "is_run_folder": "analysis.io.dressage_run",
    "iter_log_chunks": "analysis.io.load",
    "keep_versions_reproducing": "analysis.engine",
    "load_logs": "analysis.io.load",
    "log_format_for": "analysis.io.raw_writers",
    "parse_keep_versions": "analysis.engine",
    "parse_max_preempts": "analysis.engine",
    "prepare": "analysis.engine",
    "read_run": "analysis.io.dressage_run",
    "read_train_dumps": "analysis.io.train_dumps",
    "real_label": "analysis.labels",
    "records_to_table": "analysis.io.load",
    "refuse_overwriting_inputs": "analysis.io.tables",
    "replay": "analysis.engine",
    "replay_many": "analysis.engine",
    "replay_run": "analysis.engine",
    "run_length_spans": "analysis.labels",
    "simulate": "analysis.simulator",
    "sweep": "analysis.engine",
    "trajectory_outcomes": "analysis.engine",
    "who_gets_dropped": "analysis.views.bias",
    "write_canonical": "analysis.io.tables",
    "write_decisions": "analysis.io.tables",
    "write_frame": "analysis.io.tables",
    "write_frame_to": "analysis.io.tables",
    "write_log": "analysis.io.raw_writers",
    "write_run_tables": "analysis.io.tables",
    "write_trajectories": "analysis.io.tables",
}
"""The module each exported name lives in, imported on first use of the name."""

__all__ = [
    "CANONICAL_SCHEMA",
    "FRAME_FORMATS",
    "LOOP_DECISIONS",
    "REPLAY_COLUMNS",
    "TRAJECTORY_TABLE_COLUMNS",
    "AdmissionReport",
    "AdmissionRule",
    "BatchSize",
    "BiasReport",
    "CompareResult",
    "ConfigError",
    "ExitCode",
    "FieldMap",
    "InputNotFoundError",
    "Limits",
    "LoadReport",
    "LogFormatError",
    "LogInspection",
    "LoopReplay",
    "Message",
    "MissingFieldError",
    "OutputError",
    "PreparedLog",
    "ReadOptions",
    "ReplayConfig",
    "ReplayError",
    "ReplayResult",
    "ReplaySummary",
    "RunLog",
    "SettingSyntaxError",
    "SimulationConfig",
    "SweepResult",
    "TrainDumps",
    "UnknownFormatError",
    "UnsafePickleError",
    "admission_violations",
    "batch_groups_for",
    "check_output",
    "compare_logs",
    "convert_logs",
    "derive_end_version",
    "inspect_log",
    "is_run_folder",
    "iter_log_chunks",
    "keep_versions_reproducing",
    "load_logs",
    "log_format_for",
    "parse_admission",
    "parse_keep_versions",
    "parse_max_preempts",
    "prepare",
    "read_run",
    "read_train_dumps",
    "real_label",
    "records_to_table",
    "refuse_overwriting_inputs",
    "replay",
    "replay_many",
    "replay_run",
    "run_length_spans",
    "simulate",
    "sweep",
    "trajectory_outcomes",
    "who_gets_dropped",
    "write_canonical",
    "write_decisions",
    "write_frame",
    "write_frame_to",
    "write_log",
    "write_run_tables",
    "write_trajectories",
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
