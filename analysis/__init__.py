"""dressage-replay: offline staleness analysis and replay of async RL rollout logs.

Everything the command line does is here as plain functions returning values::

    import analysis
    table = analysis.load_logs(["runs/alfworld/"])
    result = analysis.replay(table, analysis.ReplayConfig(keep_versions=2, max_preempts=2))
    result.summary.to_dict()["groups"]
"""

from __future__ import annotations

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
from analysis.views.bias import BiasReport, who_gets_dropped
from analysis.views.comparison import CompareResult, compare_logs
from analysis.views.inspection import LogInspection, inspect_log

__all__ = [
    "CANONICAL_SCHEMA",
    "FRAME_FORMATS",
    "LOOP_DECISIONS",
    "REPLAY_COLUMNS",
    "TRAJECTORY_TABLE_COLUMNS",
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
