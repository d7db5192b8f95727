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
    from analysis.engine.batch_size import BatchSize, batch_groups_for
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
    from analysis.formats.dressage.run import RunLog, is_run_folder, read_run
    from analysis.formats.load import (
        iter_log_chunks,
        load_logs,
        records_to_table,
    )
    from analysis.formats.load_report import LoadReport
    from analysis.formats.slime_dumps.train_dumps import TrainDumps, read_train_dumps
    from analysis.output.checks import FRAME_FORMATS, check_output, refuse_overwriting_inputs
    from analysis.output.conversion import convert_logs, write_canonical
    from analysis.output.raw_logs import log_format_for, write_log
    from analysis.output.result_writers import (
        write_decisions,
        write_frame,
        write_frame_to,
        write_run_tables,
        write_trajectories,
    )
    from analysis.rules.admission import (
        AdmissionReport,
        AdmissionRule,
        admission_violations,
        parse_admission,
    )
    from analysis.simulation.parameters import SimulationConfig
    from analysis.simulation.simulator import simulate
    from analysis.table.fieldmap import FieldMap
    from analysis.table.labels import derive_end_version, real_label, run_length_spans
    from analysis.table.limits import Limits
    from analysis.table.options import ReadOptions
    from analysis.table.schema import CANONICAL_SCHEMA
    from analysis.views.bias import BiasReport, who_gets_dropped
    from analysis.views.comparison import CompareResult, compare_logs
    from analysis.views.inspection import LogInspection, inspect_log

_HOME: dict[str, str] = {
    "AdmissionReport": "analysis.rules.admission",
    "AdmissionRule": "analysis.rules.admission",
    "admission_violations": "analysis.rules.admission",
    "parse_admission": "analysis.rules.admission",
    "BiasReport": "analysis.views.bias",
    "CANONICAL_SCHEMA": "analysis.table.schema",
    "CompareResult": "analysis.views.comparison",
    "ConfigError": "analysis.errors",
    "ExitCode": "analysis.errors",
    "FRAME_FORMATS": "analysis.output.checks",
    "FieldMap": "analysis.formats.fields",
    "InputNotFoundError": "analysis.errors",
    "Limits": "analysis.table.limits",
    "LOOP_DECISIONS": "analysis.engine",
    "LoadReport": "analysis.formats.load_report",
    "LogFormatError": "analysis.errors",
    "LogInspection": "analysis.views.inspection",
    "LoopReplay": "analysis.engine",
    "Message": "analysis.errors",
    "MissingFieldError": "analysis.errors",
    "OutputError": "analysis.errors",
    "PreparedLog": "analysis.engine",
    "REPLAY_COLUMNS": "analysis.engine",
    "ReadOptions": "analysis.table.options",
    "ReplayConfig": "analysis.engine",
    "ReplayError": "analysis.errors",
    "ReplayResult": "analysis.engine",
    "ReplaySummary": "analysis.engine",
    "RunLog": "analysis.formats.dressage.run",
    "SettingSyntaxError": "analysis.errors",
    "SimulationConfig": "analysis.simulation.parameters",
    "SweepResult": "analysis.engine",
    "TRAJECTORY_TABLE_COLUMNS": "analysis.engine",
    "TrainDumps": "analysis.formats.slime_dumps.train_dumps",
    "UnknownFormatError": "analysis.errors",
    "UnsafePickleError": "analysis.errors",
    "batch_groups_for": "analysis.engine.batch_size",
    "BatchSize": "analysis.engine.batch_size",
    "check_output": "analysis.output.checks",
    "compare_logs": "analysis.views.comparison",
    "convert_logs": "analysis.output.conversion",
    "derive_end_version": "analysis.table.labels",
    "inspect_log": "analysis.views.inspection",
    "is_run_folder": "analysis.formats.dressage.run",
    "iter_log_chunks": "analysis.formats.load",
    "keep_versions_reproducing": "analysis.engine",
    "load_logs": "analysis.formats.load",
    "log_format_for": "analysis.output.raw_logs",
    "parse_keep_versions": "analysis.engine",
    "parse_max_preempts": "analysis.engine",
    "prepare": "analysis.engine",
    "read_run": "analysis.formats.dressage.run",
    "read_train_dumps": "analysis.formats.slime_dumps.train_dumps",
    "real_label": "analysis.table.labels",
    "records_to_table": "analysis.formats.load",
    "refuse_overwriting_inputs": "analysis.output.checks",
    "replay": "analysis.engine",
    "replay_many": "analysis.engine",
    "replay_run": "analysis.engine",
    "run_length_spans": "analysis.table.labels",
    "simulate": "analysis.simulation.simulator",
    "sweep": "analysis.engine",
    "trajectory_outcomes": "analysis.engine",
    "who_gets_dropped": "analysis.views.bias",
    "write_canonical": "analysis.output.conversion",
    "write_decisions": "analysis.output.result_writers",
    "write_frame": "analysis.output.result_writers",
    "write_frame_to": "analysis.output.result_writers",
    "write_log": "analysis.output.raw_logs",
    "write_run_tables": "analysis.output.result_writers",
    "write_trajectories": "analysis.output.result_writers",
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
