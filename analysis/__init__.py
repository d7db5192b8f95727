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

if TYPE_CHECKING:  # imported when first used (a command line's start stays fast); each
    # name `as` itself: mypy's view of the re-exports (a test keeps these and _HOME in step)
    from analysis.api import (
        Engine as Engine,
    )
    from analysis.api import (
        LoadedLog as LoadedLog,
    )
    from analysis.api import (
        NotUsedError as NotUsedError,
    )
    from analysis.api import (
        Replayed as Replayed,
    )
    from analysis.api import (
        Swept as Swept,
    )
    from analysis.api import (
        Verification as Verification,
    )
    from analysis.api import (
        load_log as load_log,
    )
    from analysis.api import (
        picks_run_loop as picks_run_loop,
    )
    from analysis.api import (
        replay as replay,
    )
    from analysis.api import (
        replay_log as replay_log,
    )
    from analysis.api import (
        sweep_log as sweep_log,
    )
    from analysis.api import (
        verify_run as verify_run,
    )
    from analysis.compare import (
        ComparedLogs as ComparedLogs,
    )
    from analysis.compare import (
        compare_inputs as compare_inputs,
    )
    from analysis.compare import (
        compare_logs as compare_logs,
    )
    from analysis.engine import (
        LOOP_DECISIONS as LOOP_DECISIONS,
    )
    from analysis.engine import PARETO_NOTE as PARETO_NOTE
    from analysis.engine import (
        REPLAY_COLUMNS as REPLAY_COLUMNS,
    )
    from analysis.engine import (
        TRAJECTORY_TABLE_COLUMNS as TRAJECTORY_TABLE_COLUMNS,
    )
    from analysis.engine import (
        LoopReplay as LoopReplay,
    )
    from analysis.engine import (
        PreparedLog as PreparedLog,
    )
    from analysis.engine import (
        ReplayConfig as ReplayConfig,
    )
    from analysis.engine import (
        ReplayResult as ReplayResult,
    )
    from analysis.engine import (
        ReplaySummary as ReplaySummary,
    )
    from analysis.engine import (
        SweepResult as SweepResult,
    )
    from analysis.engine import (
        keep_versions_reproducing as keep_versions_reproducing,
    )
    from analysis.engine import (
        parse_keep_versions as parse_keep_versions,
    )
    from analysis.engine import (
        parse_max_preempts as parse_max_preempts,
    )
    from analysis.engine import parse_one_keep_versions as parse_one_keep_versions
    from analysis.engine import parse_one_max_preempts as parse_one_max_preempts
    from analysis.engine import parse_whole as parse_whole
    from analysis.engine import (
        prepare as prepare,
    )
    from analysis.engine import (
        replay_many as replay_many,
    )
    from analysis.engine import (
        replay_run as replay_run,
    )
    from analysis.engine import (
        sweep as sweep,
    )
    from analysis.engine import (
        trajectory_outcomes as trajectory_outcomes,
    )
    from analysis.engine.batch_size import (
        BatchSize as BatchSize,
    )
    from analysis.engine.batch_size import (
        batch_groups_for as batch_groups_for,
    )
    from analysis.errors import (
        ConfigError as ConfigError,
    )
    from analysis.errors import (
        ExitCode as ExitCode,
    )
    from analysis.errors import (
        InputNotFoundError as InputNotFoundError,
    )
    from analysis.errors import (
        LogFormatError as LogFormatError,
    )
    from analysis.errors import (
        Message as Message,
    )
    from analysis.errors import (
        MissingFieldError as MissingFieldError,
    )
    from analysis.errors import (
        OutputError as OutputError,
    )
    from analysis.errors import (
        ReplayError as ReplayError,
    )
    from analysis.errors import (
        SettingSyntaxError as SettingSyntaxError,
    )
    from analysis.errors import (
        UnknownFormatError as UnknownFormatError,
    )
    from analysis.errors import (
        UnsafePickleError as UnsafePickleError,
    )
    from analysis.errors import counted as counted
    from analysis.errors import render as render
    from analysis.formats.dressage.run import (
        RunLog as RunLog,
    )
    from analysis.formats.dressage.run import (
        is_run_folder as is_run_folder,
    )
    from analysis.formats.dressage.run import (
        read_run as read_run,
    )
    from analysis.formats.dressage.run import run_target_groups as run_target_groups
    from analysis.formats.fields import FieldMap as FieldMap
    from analysis.formats.load import SKIP_REASON_NOUNS as SKIP_REASON_NOUNS
    from analysis.formats.load import (
        LoadReport as LoadReport,
    )
    from analysis.formats.load import (
        iter_log_chunks as iter_log_chunks,
    )
    from analysis.formats.load import (
        load_logs as load_logs,
    )
    from analysis.formats.load import (
        records_to_table as records_to_table,
    )
    from analysis.formats.peers import converted_warnings as converted_warnings
    from analysis.formats.peers import peer_warnings as peer_warnings
    from analysis.formats.slime_dumps.train_dumps import (
        TrainDumps as TrainDumps,
    )
    from analysis.formats.slime_dumps.train_dumps import (
        read_train_dumps as read_train_dumps,
    )
    from analysis.output.partitioned import convert_partitioned as convert_partitioned
    from analysis.output.partitioned import run_local as run_local
    from analysis.output.raw_logs import log_format_for as log_format_for
    from analysis.output.raw_logs import write_log as write_log
    from analysis.output.ray_runner import RAY_LOCAL as RAY_LOCAL
    from analysis.output.ray_runner import run_ray as run_ray
    from analysis.output.tables import (
        FRAME_FORMATS as FRAME_FORMATS,
    )
    from analysis.output.tables import (
        check_output as check_output,
    )
    from analysis.output.tables import (
        convert_logs as convert_logs,
    )
    from analysis.output.tables import (
        refuse_overwriting_inputs as refuse_overwriting_inputs,
    )
    from analysis.output.tables import (
        write_canonical as write_canonical,
    )
    from analysis.output.tables import (
        write_decisions as write_decisions,
    )
    from analysis.output.tables import (
        write_frame as write_frame,
    )
    from analysis.output.tables import (
        write_frame_to as write_frame_to,
    )
    from analysis.output.tables import (
        write_run_tables as write_run_tables,
    )
    from analysis.output.tables import (
        write_trajectories as write_trajectories,
    )
    from analysis.rules.admission import (
        AdmissionReport as AdmissionReport,
    )
    from analysis.rules.admission import (
        AdmissionRule as AdmissionRule,
    )
    from analysis.rules.admission import (
        admission_violations as admission_violations,
    )
    from analysis.rules.admission import (
        parse_admission as parse_admission,
    )
    from analysis.rules.policies import (
        DressagePolicy as DressagePolicy,
    )
    from analysis.rules.policies import (
        Policy as Policy,
    )
    from analysis.rules.policies import (
        PolicyResult as PolicyResult,
    )
    from analysis.rules.policies import PolicySweep as PolicySweep
    from analysis.rules.policies import (
        parse_policy as parse_policy,
    )
    from analysis.rules.policies import sweep_policies as sweep_policies
    from analysis.rules.simulated_admission import simulation_rule as simulation_rule
    from analysis.rules.spec import defaults_applied as defaults_applied
    from analysis.simulation.fit import Fit as Fit
    from analysis.simulation.fit import fit_run as fit_run
    from analysis.simulation.simulator import (
        SimulationConfig as SimulationConfig,
    )
    from analysis.simulation.simulator import (
        simulate as simulate,
    )
    from analysis.studies import (
        build_report as build_report,
    )
    from analysis.studies import (
        focus_setting as focus_setting,
    )
    from analysis.studies import (
        make_plot as make_plot,
    )
    from analysis.studies import (
        report_content as report_content,
    )
    from analysis.table.labels import (
        derive_end_version as derive_end_version,
    )
    from analysis.table.labels import (
        real_label as real_label,
    )
    from analysis.table.labels import (
        run_length_spans as run_length_spans,
    )
    from analysis.table.limits import Limits as Limits
    from analysis.table.options import ReadOptions as ReadOptions
    from analysis.table.schema import CANONICAL_SCHEMA as CANONICAL_SCHEMA
    from analysis.views.bias import OUTCOME_WORDS as OUTCOME_WORDS
    from analysis.views.bias import BiasReport as BiasReport
    from analysis.views.bias import who_gets_dropped as who_gets_dropped
    from analysis.views.comparison import (
        CompareResult as CompareResult,
    )
    from analysis.views.comparison import plot_compare as plot_compare
    from analysis.views.inspection import LogInspection as LogInspection
    from analysis.views.inspection import inspect_log as inspect_log
    from analysis.views.plots import FIGURE_FORMATS as FIGURE_FORMATS
    from analysis.views.plots import save_figure as save_figure
    from analysis.views.plots import settings_note as settings_note
    from analysis.views.policy_plots import plot_policies as plot_policies
    from analysis.views.report import REPORT_FORMATS as REPORT_FORMATS
    from analysis.views.report import write_report as write_report
    from analysis.views.tables import SWEEP_CAPTION as SWEEP_CAPTION
    from analysis.views.tables import policy_sweep_table as policy_sweep_table
    from analysis.views.tables import sweep_table as sweep_table

_HOME: dict[str, str] = {
    "render": "analysis.errors",
    "counted": "analysis.errors",
    "PARETO_NOTE": "analysis.engine",
    "parse_whole": "analysis.engine",
    "parse_one_keep_versions": "analysis.engine",
    "parse_one_max_preempts": "analysis.engine",
    "SWEEP_CAPTION": "analysis.views.tables",
    "policy_sweep_table": "analysis.views.tables",
    "sweep_table": "analysis.views.tables",
    "Fit": "analysis.simulation.fit",
    "fit_run": "analysis.simulation.fit",
    "OUTCOME_WORDS": "analysis.views.bias",
    "SKIP_REASON_NOUNS": "analysis.formats.load",
    "defaults_applied": "analysis.rules.spec",
    "REPORT_FORMATS": "analysis.views.report",
    "write_report": "analysis.views.report",
    "FIGURE_FORMATS": "analysis.views.plots",
    "save_figure": "analysis.views.plots",
    "settings_note": "analysis.views.plots",
    "plot_compare": "analysis.views.comparison",
    "sweep_policies": "analysis.rules.policies",
    "PolicySweep": "analysis.rules.policies",
    "plot_policies": "analysis.views.policy_plots",
    "simulation_rule": "analysis.rules.simulated_admission",
    "peer_warnings": "analysis.formats.peers",
    "converted_warnings": "analysis.formats.peers",
    "run_target_groups": "analysis.formats.dressage.run",
    "convert_partitioned": "analysis.output.partitioned",
    "run_local": "analysis.output.partitioned",
    "RAY_LOCAL": "analysis.output.ray_runner",
    "run_ray": "analysis.output.ray_runner",
    "AdmissionReport": "analysis.rules.admission",
    "AdmissionRule": "analysis.rules.admission",
    "admission_violations": "analysis.rules.admission",
    "parse_admission": "analysis.rules.admission",
    "BiasReport": "analysis.views.bias",
    "CANONICAL_SCHEMA": "analysis.table.schema",
    "CompareResult": "analysis.views.comparison",
    "ConfigError": "analysis.errors",
    "ExitCode": "analysis.errors",
    "FRAME_FORMATS": "analysis.output.tables",
    "FieldMap": "analysis.formats.fields",
    "InputNotFoundError": "analysis.errors",
    "Limits": "analysis.table.limits",
    "LOOP_DECISIONS": "analysis.engine",
    "LoadReport": "analysis.formats.load",
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
    "SimulationConfig": "analysis.simulation.simulator",
    "SweepResult": "analysis.engine",
    "TRAJECTORY_TABLE_COLUMNS": "analysis.engine",
    "TrainDumps": "analysis.formats.slime_dumps.train_dumps",
    "UnknownFormatError": "analysis.errors",
    "UnsafePickleError": "analysis.errors",
    "batch_groups_for": "analysis.engine.batch_size",
    "BatchSize": "analysis.engine.batch_size",
    "check_output": "analysis.output.tables",
    "compare_logs": "analysis.compare",
    "compare_inputs": "analysis.compare",
    "ComparedLogs": "analysis.compare",
    "convert_logs": "analysis.output.tables",
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
    "refuse_overwriting_inputs": "analysis.output.tables",
    "replay": "analysis.api",
    "replay_log": "analysis.api",
    "Engine": "analysis.api",
    "LoadedLog": "analysis.api",
    "Swept": "analysis.api",
    "Verification": "analysis.api",
    "verify_run": "analysis.api",
    "load_log": "analysis.api",
    "sweep_log": "analysis.api",
    "NotUsedError": "analysis.api",
    "Replayed": "analysis.api",
    "picks_run_loop": "analysis.api",
    "DressagePolicy": "analysis.rules.policies",
    "Policy": "analysis.rules.policies",
    "build_report": "analysis.studies",
    "focus_setting": "analysis.studies",
    "make_plot": "analysis.studies",
    "report_content": "analysis.studies",
    "PolicyResult": "analysis.rules.policies",
    "parse_policy": "analysis.rules.policies",
    "replay_many": "analysis.engine",
    "replay_run": "analysis.engine",
    "run_length_spans": "analysis.table.labels",
    "simulate": "analysis.simulation.simulator",
    "sweep": "analysis.engine",
    "trajectory_outcomes": "analysis.engine",
    "who_gets_dropped": "analysis.views.bias",
    "write_canonical": "analysis.output.tables",
    "write_decisions": "analysis.output.tables",
    "write_frame": "analysis.output.tables",
    "write_frame_to": "analysis.output.tables",
    "write_log": "analysis.output.raw_logs",
    "write_run_tables": "analysis.output.tables",
    "write_trajectories": "analysis.output.tables",
}
"""The module each exported name lives in, imported on first use of the name."""

__all__ = sorted(_HOME)


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
