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

if TYPE_CHECKING:  # imported when first used (a command line's start stays fast); each name
    # `as` itself, so that mypy sees the re-exports (a test keeps these and _HOME in step)
    from analysis.api import (
        Engine as Engine,
        LoadedLog as LoadedLog,
        NotUsedError as NotUsedError,
        Replayed as Replayed,
        load_log as load_log,
        picks_run_loop as picks_run_loop,
        read_run_folder as read_run_folder,
        replay as replay,
        replay_log as replay_log,
    )
    from analysis.compare import (
        ComparedLogs as ComparedLogs,
        compare_inputs as compare_inputs,
        compare_logs as compare_logs,
    )
    from analysis.engine import (
        LOOP_DECISIONS as LOOP_DECISIONS,
        PARETO_NOTE as PARETO_NOTE,
        REPLAY_COLUMNS as REPLAY_COLUMNS,
        TRAJECTORY_TABLE_COLUMNS as TRAJECTORY_TABLE_COLUMNS,
        LoopReplay as LoopReplay,
        PreparedLog as PreparedLog,
        ReplayConfig as ReplayConfig,
        ReplayResult as ReplayResult,
        ReplaySummary as ReplaySummary,
        SweepResult as SweepResult,
        keep_versions_reproducing as keep_versions_reproducing,
        parse_keep_versions as parse_keep_versions,
        parse_max_preempts as parse_max_preempts,
        parse_one_keep_versions as parse_one_keep_versions,
        parse_one_max_preempts as parse_one_max_preempts,
        parse_whole as parse_whole,
        prepare as prepare,
        replay_many as replay_many,
        replay_run as replay_run,
        trajectory_outcomes as trajectory_outcomes,
    )
    from analysis.engine.batch_size import (
        BatchSize as BatchSize,
        batch_groups_for as batch_groups_for,
    )
    from analysis.engine.config import (
        k_label as k_label,
        m_label as m_label,
    )
    from analysis.engine.decisions import (
        Decision as Decision,
        Outcome as Outcome,
        Stage as Stage,
    )
    from analysis.engine.run_loop.sweep import (
        LoopSetting as LoopSetting,
        sweep_run as sweep_run,
    )
    from analysis.errors import (
        ConfigError as ConfigError,
        ExitCode as ExitCode,
        Explained as Explained,
        InputNotFoundError as InputNotFoundError,
        LogFormatError as LogFormatError,
        Message as Message,
        MissingFieldError as MissingFieldError,
        OutputError as OutputError,
        ReplayError as ReplayError,
        SettingSyntaxError as SettingSyntaxError,
        SkipReason as SkipReason,
        UnknownFormatError as UnknownFormatError,
        UnsafePickleError as UnsafePickleError,
        counted as counted,
        detail_of as detail_of,
        render as render,
    )
    from analysis.formats import (
        format_names as format_names,
    )
    from analysis.formats.discover import (
        run_folder_read_as_log as run_folder_read_as_log,
    )
    from analysis.formats.dressage.run import (
        RunLog as RunLog,
        is_run_folder as is_run_folder,
        read_run as read_run,
        run_target_groups as run_target_groups,
    )
    from analysis.formats.load import (
        iter_log_chunks as iter_log_chunks,
        load_logs as load_logs,
        records_to_table as records_to_table,
    )
    from analysis.formats.load_report import (
        LoadReport as LoadReport,
    )
    from analysis.formats.registry import (
        converted_warnings as converted_warnings,
        peer_warnings as peer_warnings,
    )
    from analysis.formats.slime_dumps.train_dumps import (
        TrainDumps as TrainDumps,
        read_train_dumps as read_train_dumps,
    )
    from analysis.output.atomic import (
        set_aside as set_aside,
    )
    from analysis.output.checks import (
        FRAME_FORMATS as FRAME_FORMATS,
        check_folder as check_folder,
        check_output as check_output,
        refuse_overwriting_inputs as refuse_overwriting_inputs,
    )
    from analysis.output.conversion import (
        convert_logs as convert_logs,
        write_canonical as write_canonical,
    )
    from analysis.output.partitioned import (
        convert_partitioned as convert_partitioned,
        run_local as run_local,
    )
    from analysis.output.raw_logs import (
        log_format_for as log_format_for,
        write_log as write_log,
    )
    from analysis.output.ray_runner import (
        RAY_LOCAL as RAY_LOCAL,
        run_ray as run_ray,
    )
    from analysis.output.result_writers import (
        write_decisions as write_decisions,
        write_frame as write_frame,
        write_frame_to as write_frame_to,
        write_run_tables as write_run_tables,
        write_trajectories as write_trajectories,
    )
    from analysis.rules.admission import (
        AdmissionReport as AdmissionReport,
        AdmissionRule as AdmissionRule,
        admission_violations as admission_violations,
        parse_admission as parse_admission,
    )
    from analysis.rules.policies import (
        DressagePolicy as DressagePolicy,
        Policy as Policy,
        PolicyResult as PolicyResult,
        PolicySweep as PolicySweep,
        parse_policy as parse_policy,
        sweep_policies as sweep_policies,
    )
    from analysis.rules.simulated_admission import (
        simulation_rule as simulation_rule,
    )
    from analysis.rules.spec import (
        defaults_applied as defaults_applied,
    )
    from analysis.simulation.fit import (
        Fit as Fit,
        fit_run as fit_run,
    )
    from analysis.simulation.parameters import (
        SimulationConfig as SimulationConfig,
    )
    from analysis.simulation.predict import (
        MOST_DRAWS as MOST_DRAWS,
    )
    from analysis.simulation.run_like import (
        LikeRun as LikeRun,
        like_run as like_run,
    )
    from analysis.simulation.simulator import (
        simulate as simulate,
    )
    from analysis.studies import (
        build_report as build_report,
        focus_setting as focus_setting,
        make_plot as make_plot,
        make_run_plot as make_run_plot,
        report_content as report_content,
        run_plot_k as run_plot_k,
        run_report_content as run_report_content,
    )
    from analysis.sweeps import (
        Swept as Swept,
        sweep as sweep,
        sweep_log as sweep_log,
    )
    from analysis.table.fieldmap import (
        FieldMap as FieldMap,
    )
    from analysis.table.labels import (
        derive_end_version as derive_end_version,
        real_label as real_label,
        run_length_spans as run_length_spans,
    )
    from analysis.table.limits import (
        Limits as Limits,
    )
    from analysis.table.options import (
        ReadOptions as ReadOptions,
    )
    from analysis.table.schema import (
        CANONICAL_SCHEMA as CANONICAL_SCHEMA,
    )
    from analysis.verification import (
        RunThrownAway as RunThrownAway,
        ThrownAway as ThrownAway,
        Verification as Verification,
        run_thrown_away as run_thrown_away,
        verify_run as verify_run,
    )
    from analysis.views.bias import (
        OUTCOME_WORDS as OUTCOME_WORDS,
        BiasReport as BiasReport,
        who_gets_dropped as who_gets_dropped,
    )
    from analysis.views.comparison import (
        CompareResult as CompareResult,
        plot_compare as plot_compare,
    )
    from analysis.views.inspection import (
        LogInspection as LogInspection,
        inspect_log as inspect_log,
    )
    from analysis.views.plots import (
        FIGURE_FORMATS as FIGURE_FORMATS,
        save_figure as save_figure,
        settings_note as settings_note,
    )
    from analysis.views.policy_plots import (
        plot_policies as plot_policies,
    )
    from analysis.views.report import (
        REPORT_FORMATS as REPORT_FORMATS,
        write_report as write_report,
    )
    from analysis.views.tables import (
        ENGINE_WORDS as ENGINE_WORDS,
        RUN_REPLAY_NOTE as RUN_REPLAY_NOTE,
        RUN_SWEEP_NOTE as RUN_SWEEP_NOTE,
        SWEEP_CAPTION as SWEEP_CAPTION,
        m_not_applied_note as m_not_applied_note,
        policy_sweep_table as policy_sweep_table,
        run_policy_note as run_policy_note,
        run_sweep_note as run_sweep_note,
        sweep_caption as sweep_caption,
        sweep_table as sweep_table,
    )

_HOME: dict[str, str] = {
    "admission_violations": "analysis.rules.admission",
    "AdmissionReport": "analysis.rules.admission",
    "AdmissionRule": "analysis.rules.admission",
    "batch_groups_for": "analysis.engine.batch_size",
    "BatchSize": "analysis.engine.batch_size",
    "BiasReport": "analysis.views.bias",
    "build_report": "analysis.studies",
    "CANONICAL_SCHEMA": "analysis.table.schema",
    "check_folder": "analysis.output.checks",
    "check_output": "analysis.output.checks",
    "set_aside": "analysis.output.atomic",
    "compare_inputs": "analysis.compare",
    "compare_logs": "analysis.compare",
    "ComparedLogs": "analysis.compare",
    "CompareResult": "analysis.views.comparison",
    "ConfigError": "analysis.errors",
    "convert_logs": "analysis.output.conversion",
    "convert_partitioned": "analysis.output.partitioned",
    "converted_warnings": "analysis.formats.registry",
    "counted": "analysis.errors",
    "Decision": "analysis.engine.decisions",
    "defaults_applied": "analysis.rules.spec",
    "derive_end_version": "analysis.table.labels",
    "DressagePolicy": "analysis.rules.policies",
    "Engine": "analysis.api",
    "ExitCode": "analysis.errors",
    "FieldMap": "analysis.table.fieldmap",
    "FIGURE_FORMATS": "analysis.views.plots",
    "Fit": "analysis.simulation.fit",
    "fit_run": "analysis.simulation.fit",
    "like_run": "analysis.simulation.run_like",
    "LikeRun": "analysis.simulation.run_like",
    "focus_setting": "analysis.studies",
    "format_names": "analysis.formats",
    "run_folder_read_as_log": "analysis.formats.discover",
    "FRAME_FORMATS": "analysis.output.checks",
    "InputNotFoundError": "analysis.errors",
    "inspect_log": "analysis.views.inspection",
    "is_run_folder": "analysis.formats.dressage.run",
    "iter_log_chunks": "analysis.formats.load",
    "k_label": "analysis.engine.config",
    "keep_versions_reproducing": "analysis.engine",
    "Limits": "analysis.table.limits",
    "load_log": "analysis.api",
    "load_logs": "analysis.formats.load",
    "LoadedLog": "analysis.api",
    "LoadReport": "analysis.formats.load_report",
    "log_format_for": "analysis.output.raw_logs",
    "LogFormatError": "analysis.errors",
    "LogInspection": "analysis.views.inspection",
    "LOOP_DECISIONS": "analysis.engine",
    "LoopReplay": "analysis.engine",
    "m_label": "analysis.engine.config",
    "make_plot": "analysis.studies",
    "run_plot_k": "analysis.studies",
    "make_run_plot": "analysis.studies",
    "run_report_content": "analysis.studies",
    "read_run_folder": "analysis.api",
    "sweep_run": "analysis.engine.run_loop.sweep",
    "LoopSetting": "analysis.engine.run_loop.sweep",
    "Message": "analysis.errors",
    "Explained": "analysis.errors",
    "detail_of": "analysis.errors",
    "MissingFieldError": "analysis.errors",
    "NotUsedError": "analysis.api",
    "Outcome": "analysis.engine.decisions",
    "OUTCOME_WORDS": "analysis.views.bias",
    "OutputError": "analysis.errors",
    "PARETO_NOTE": "analysis.engine",
    "parse_admission": "analysis.rules.admission",
    "parse_keep_versions": "analysis.engine",
    "parse_max_preempts": "analysis.engine",
    "parse_one_keep_versions": "analysis.engine",
    "parse_one_max_preempts": "analysis.engine",
    "parse_policy": "analysis.rules.policies",
    "parse_whole": "analysis.engine",
    "peer_warnings": "analysis.formats.registry",
    "picks_run_loop": "analysis.api",
    "plot_compare": "analysis.views.comparison",
    "plot_policies": "analysis.views.policy_plots",
    "Policy": "analysis.rules.policies",
    "policy_sweep_table": "analysis.views.tables",
    "PolicyResult": "analysis.rules.policies",
    "PolicySweep": "analysis.rules.policies",
    "prepare": "analysis.engine",
    "PreparedLog": "analysis.engine",
    "RAY_LOCAL": "analysis.output.ray_runner",
    "read_run": "analysis.formats.dressage.run",
    "read_train_dumps": "analysis.formats.slime_dumps.train_dumps",
    "ReadOptions": "analysis.table.options",
    "real_label": "analysis.table.labels",
    "records_to_table": "analysis.formats.load",
    "refuse_overwriting_inputs": "analysis.output.checks",
    "render": "analysis.errors",
    "replay": "analysis.api",
    "REPLAY_COLUMNS": "analysis.engine",
    "replay_log": "analysis.api",
    "replay_many": "analysis.engine",
    "replay_run": "analysis.engine",
    "ReplayConfig": "analysis.engine",
    "Replayed": "analysis.api",
    "ReplayError": "analysis.errors",
    "ReplayResult": "analysis.engine",
    "ReplaySummary": "analysis.engine",
    "report_content": "analysis.studies",
    "REPORT_FORMATS": "analysis.views.report",
    "run_length_spans": "analysis.table.labels",
    "run_local": "analysis.output.partitioned",
    "run_ray": "analysis.output.ray_runner",
    "run_target_groups": "analysis.formats.dressage.run",
    "RunLog": "analysis.formats.dressage.run",
    "save_figure": "analysis.views.plots",
    "settings_note": "analysis.views.plots",
    "SettingSyntaxError": "analysis.errors",
    "simulate": "analysis.simulation.simulator",
    "simulation_rule": "analysis.rules.simulated_admission",
    "SimulationConfig": "analysis.simulation.parameters",
    "SkipReason": "analysis.errors",
    "Stage": "analysis.engine.decisions",
    "sweep": "analysis.sweeps",
    "SWEEP_CAPTION": "analysis.views.tables",
    "MOST_DRAWS": "analysis.simulation.predict",
    "RUN_REPLAY_NOTE": "analysis.views.tables",
    "RUN_SWEEP_NOTE": "analysis.views.tables",
    "ENGINE_WORDS": "analysis.views.tables",
    "m_not_applied_note": "analysis.views.tables",
    "run_policy_note": "analysis.views.tables",
    "run_sweep_note": "analysis.views.tables",
    "sweep_caption": "analysis.views.tables",
    "sweep_log": "analysis.sweeps",
    "sweep_policies": "analysis.rules.policies",
    "sweep_table": "analysis.views.tables",
    "SweepResult": "analysis.engine",
    "Swept": "analysis.sweeps",
    "TrainDumps": "analysis.formats.slime_dumps.train_dumps",
    "trajectory_outcomes": "analysis.engine",
    "TRAJECTORY_TABLE_COLUMNS": "analysis.engine",
    "UnknownFormatError": "analysis.errors",
    "UnsafePickleError": "analysis.errors",
    "Verification": "analysis.verification",
    "RunThrownAway": "analysis.verification",
    "ThrownAway": "analysis.verification",
    "run_thrown_away": "analysis.verification",
    "verify_run": "analysis.verification",
    "who_gets_dropped": "analysis.views.bias",
    "write_canonical": "analysis.output.conversion",
    "write_decisions": "analysis.output.result_writers",
    "write_frame": "analysis.output.result_writers",
    "write_frame_to": "analysis.output.result_writers",
    "write_log": "analysis.output.raw_logs",
    "write_report": "analysis.views.report",
    "write_run_tables": "analysis.output.result_writers",
    "write_trajectories": "analysis.output.result_writers",
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
