"""dressage-replay: offline staleness analysis and replay of async RL rollout logs.

Everything the command line does is here as plain functions returning values::

    import analysis
    table = analysis.load_logs(["runs/alfworld/"])
    result = analysis.replay(table, analysis.ReplayConfig(keep_versions=2, max_preempts=2))
    result.summary.to_dict()["groups"]
"""

from __future__ import annotations

from analysis.bias import BiasReport, who_gets_dropped
from analysis.compare import CompareResult, compare_logs
from analysis.errors import (
    ConfigError,
    InputNotFoundError,
    LogFormatError,
    MissingFieldError,
    OutputError,
    ReplayError,
    UnknownFormatError,
    UnsafePickleError,
)
from analysis.inspect import LogInspection, inspect_log
from analysis.labels import derive_end_version, real_label, run_length_spans
from analysis.load import (
    CANONICAL_SCHEMA,
    FieldMap,
    LoadReport,
    iter_log_chunks,
    load_logs,
    records_to_table,
)
from analysis.output import (
    FRAME_FORMATS,
    check_output,
    convert_logs,
    refuse_overwriting_inputs,
    write_canonical,
    write_decisions,
    write_frame,
    write_frame_to,
)
from analysis.replay import (
    REPLAY_COLUMNS,
    PreparedLog,
    ReplayConfig,
    ReplayResult,
    ReplaySummary,
    prepare,
    replay,
    replay_many,
    trajectory_outcomes,
)
from analysis.simulate import SimulationConfig, simulate
from analysis.sweep import SweepResult, parse_keep_versions, parse_max_preempts, sweep
from analysis.writers import log_format_for, write_log

__all__ = [
    "CANONICAL_SCHEMA",
    "FRAME_FORMATS",
    "REPLAY_COLUMNS",
    "BiasReport",
    "CompareResult",
    "ConfigError",
    "FieldMap",
    "InputNotFoundError",
    "LoadReport",
    "LogFormatError",
    "LogInspection",
    "MissingFieldError",
    "OutputError",
    "PreparedLog",
    "ReplayConfig",
    "ReplayError",
    "ReplayResult",
    "ReplaySummary",
    "SimulationConfig",
    "SweepResult",
    "UnknownFormatError",
    "UnsafePickleError",
    "check_output",
    "compare_logs",
    "convert_logs",
    "derive_end_version",
    "inspect_log",
    "iter_log_chunks",
    "load_logs",
    "log_format_for",
    "parse_keep_versions",
    "parse_max_preempts",
    "prepare",
    "real_label",
    "records_to_table",
    "refuse_overwriting_inputs",
    "replay",
    "replay_many",
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
]
