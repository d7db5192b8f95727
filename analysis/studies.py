"""The computing behind the views: the replays a report, a figure or a comparison needs,
run here, and handed to the view that renders them (``analysis.views`` never replays).

    import analysis
    prepared = analysis.prepare(analysis.load_logs(["runs/alfworld/"]))
    figure = analysis.make_plot("sweep", prepared, keep_versions=[0, 1, 2], max_preempts=[None, 1])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import polars as pl

from analysis.engine import PreparedLog, ReplayConfig, ReplayResult, SweepResult, replay, sweep
from analysis.engine.grid import SettingReplays
from analysis.engine.run_loop.checks import keep_versions_told
from analysis.engine.run_loop.sweep import LoopSetting
from analysis.errors import ConfigError, setting
from analysis.formats.dressage.run import RunLog
from analysis.rules.policies import PolicySweep, sweep_policies
from analysis.simulation.loop_policies import loop_policy_sweep
from analysis.simulation.predict import MODEL_DRAWS, WhatIf, run_sweep
from analysis.views import plots
from analysis.views.bias import who_gets_dropped
from analysis.views.inspection import LogInspection
from analysis.views.report import ReportContent, render_report

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _acting(rows: pl.DataFrame) -> pl.DataFrame:
    """The rows with ``controls`` (how many controls are on: K > 0, M given) and ``acting``
    (how many of those decide something on this log: a K that drops a stale group, an M
    that rejects a span)."""
    k_on = pl.col("keep_versions") > 0
    m_on = pl.col("max_preempts").is_not_null()
    k_acts = k_on & (pl.col("dropped_stale_pct").fill_null(0) > 0)
    m_acts = m_on & (pl.col("rejected_span_pct").fill_null(0) > 0)
    return rows.with_columns(
        (k_on.cast(pl.Int8) + m_on.cast(pl.Int8)).alias("controls"),
        (k_acts.cast(pl.Int8) + m_acts.cast(pl.Int8)).alias("acting"),
    )


def focus_setting(result: SweepResult) -> ReplayResult | LoopSetting:
    """The setting the report looks at closely: of the Pareto-efficient settings with a
    control on, one where every control that is on acts on this log (K drops a stale
    group, M rejects a span) before one where a control decides nothing; then both
    controls on (as Dressage runs) before one; then the one that keeps the most tokens
    (samples when tokens are unknown); else the first setting. A K that drops nothing
    decides as K off: featured, its per-batch drops would be an empty panel."""
    rows = _acting(result.rows.with_row_index("position"))
    kept = "tokens_kept_pct" if rows["tokens_kept_pct"].null_count() == 0 else "samples_kept_pct"
    candidates = (
        rows.with_columns((pl.col("acting") == pl.col("controls")).alias("all_act"))
        .filter(pl.col("pareto") & (pl.col("controls") > 0))
        .sort(["all_act", "acting", "controls", kept], descending=True, maintain_order=True)
    )
    position = int(candidates["position"][0]) if candidates.height else 0
    return result.results[position]


def _is_chosen(result: SweepResult, focus: ReplayResult | LoopSetting) -> bool:
    """Whether the focus setting is Pareto-efficient with a control on (not the fallback)."""
    row = _focus_row(result, focus)
    config = focus.config
    return bool(
        row.height
        and row["pareto"][0]
        and (config.keep_versions > 0 or config.max_preempts is not None)
    )


def _focus_row(result: SweepResult, focus: ReplayResult | LoopSetting) -> pl.DataFrame:
    config = focus.config
    return _acting(result.rows).filter(
        (pl.col("keep_versions") == config.keep_versions)
        & pl.col("max_preempts").eq_missing(config.max_preempts)
    )


def _idle_controls(result: SweepResult, focus: ReplayResult | LoopSetting) -> str:
    """Words for each control of ``focus`` that is on and decides nothing on this log
    (empty when every control on acts)."""
    row = _focus_row(result, focus)
    if not row.height:
        return ""
    config = focus.config
    idle = []
    if config.keep_versions > 0 and not (row["dropped_stale_pct"].fill_null(0)[0] > 0):
        idle.append(
            f"K={config.keep_versions} drops no stale group on this log, so it decides as K off"
        )
    if config.max_preempts is not None and not (row["rejected_span_pct"].fill_null(0)[0] > 0):
        idle.append(
            f"M={config.max_preempts} rejects no trajectory on this log, so it decides as M off"
        )
    return "; ".join(idle)


def _has_control(result: SweepResult) -> bool:
    """Whether any swept setting has a control on (K > 0 or M given)."""
    rows = result.rows
    return bool(((rows["keep_versions"] > 0) | rows["max_preempts"].is_not_null()).any())


def report_content(
    prepared: PreparedLog,
    table: pl.DataFrame,
    *,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    batch_groups: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    policies: Sequence[Any] = (),
    formats: tuple[str, ...] = (),
) -> ReportContent:
    """The replays a report shows: the sweep, the setting looked at closely
    (:func:`focus_setting`), who it drops, and ``policies`` swept on the same log (read
    from ``formats``, for their own clocks: docs/semantics.md §13.2)."""
    swept = sweep(
        prepared,
        keep_versions=keep_versions,
        max_preempts=max_preempts,
        batch_groups=batch_groups,
        progress=progress,
    )
    focus = focus_setting(swept)
    assert isinstance(focus, ReplayResult)  # a sweep of the simple loop
    return ReportContent(
        swept=swept,
        focus=focus,
        chosen=_chosen_words(swept, focus),
        # Every K under the focus setting's M, each replayed again as the figure reads it
        # (the sweep keeps its rows only).
        per_k=swept.results.where(max_preempts=focus.config.max_preempts),
        bias=who_gets_dropped(prepared, focus, table=table),
        policies=(
            sweep_policies(prepared, policies, batch_groups=batch_groups, formats=formats)
            if policies
            else None
        ),
    )


def _chosen_words(swept: SweepResult, focus: ReplayResult | LoopSetting) -> str:
    """Why the report looks closely at ``focus``, in words, and which of its controls
    decides nothing on this log."""
    why = (
        "the Pareto-efficient setting with a control on where each control on acts "
        "(K drops, M rejects), both controls on before one, then the most tokens kept"
        if _is_chosen(swept, focus)
        else "the first setting (no setting with a control on is Pareto-efficient)"
        if _has_control(swept)
        else "the first setting (no setting with a control on was swept)"
    )
    idle = _idle_controls(swept, focus)
    return why + (f" ({idle})" if idle else "")


def run_report_content(
    run: RunLog,
    prepared: PreparedLog,
    *,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    loop: Literal["partial", "fully"] | None = None,
    progress: Callable[[int, int], None] | None = None,
    policies: Sequence[Any] = (),
    what_if: WhatIf = "model",
    draws: int = MODEL_DRAWS,
    seed: int = 0,
) -> ReportContent:
    """A run folder's report on Dressage's own loop (docs/semantics.md §12.7): the sweep of
    :func:`run_sweep` (its what-ifs from the run's model, §12.8), the setting looked at
    closely (the run's own when a row is, else as :func:`focus_setting` chooses), its
    settings per K;
    no who-gets-dropped (a comparison of the simple loop), the replay's decisions instead.
    ``policies`` run on the run's own loop as ``sweep --policy`` runs them (§12.9)."""
    swept = run_sweep(
        run, keep_versions=keep_versions, max_preempts=max_preempts, loop=loop,
        progress=progress, what_if=what_if, draws=draws, seed=seed,
    )  # fmt: skip
    own = swept.rows.with_row_index("position").filter(pl.col("own_setting"))
    focus = swept.results[int(own["position"][0])] if own.height else focus_setting(swept)
    if own.height:
        idle = _idle_controls(swept, focus)
        chosen = (
            "the run's own setting (K as its staleness metrics tell, M as its span rejections "
            "name), as replay RUN replays it" + (f" ({idle})" if idle else "")
        )
    else:
        chosen = _chosen_words(swept, focus)
    return ReportContent(
        swept=swept,
        focus=focus,
        chosen=chosen,
        per_k=swept.results.where(max_preempts=focus.config.max_preempts),
        bias=None,
        policies=_run_policies(
            run, prepared, policies, loop=loop, what_if=what_if, draws=draws, seed=seed
        )
        if policies
        else None,
    )


def _run_policies(
    run: RunLog,
    prepared: PreparedLog,
    policies: Sequence[Any],
    *,
    loop: Literal["partial", "fully"] | None,
    what_if: WhatIf,
    draws: int,
    seed: int,
) -> PolicySweep:
    """A run folder's policies on its own loop (docs/semantics.md §12.9), or on the simple
    loop over the folder read as one log with ``what_if="replay"`` or no model."""
    if what_if == "model":
        try:
            return loop_policy_sweep(run, policies, loop=loop, draws=draws, seed=seed)
        except ConfigError:
            pass  # no model: the report's sweep notes say why
    return sweep_policies(prepared, policies, batch_groups=run.target_groups)


def make_run_plot(
    kind: str,
    run: RunLog,
    *,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    loop: Literal["partial", "fully"] | None = None,
    progress: Callable[[int, int], None] | None = None,
    what_if: WhatIf = "model",
    draws: int = MODEL_DRAWS,
    seed: int = 0,
) -> Figure:
    """:func:`make_plot` for a run folder, on Dressage's own loop: ``sweep`` and
    ``heatmap`` draw :func:`run_sweep`'s rows; ``spans`` and ``timeline`` the first K (the
    replay, ``replay RUN -k K``, at the run's own setting; else the model's draws), or
    with no K given (an empty list) the run's own K as its staleness metrics tell
    (:func:`run_plot_k`); ``gaps`` each K. No M list: the run's own M."""
    if kind in ("spans", "timeline") and not keep_versions:
        keep_versions = [run_plot_k(run)]
    _check_plot(kind, keep_versions, max_preempts or [None])
    if kind in ("sweep", "heatmap"):
        result = run_sweep(
            run, keep_versions=keep_versions, max_preempts=max_preempts, loop=loop,
            progress=progress, what_if=what_if, draws=draws, seed=seed,
        )  # fmt: skip
        return plots.plot_sweep(result) if kind == "sweep" else plots.plot_heatmap(result)
    if kind == "gaps":
        per_k = run_sweep(
            run, keep_versions=keep_versions, max_preempts=max_preempts[:1], loop=loop,
            what_if=what_if, draws=draws, seed=seed,
        )  # fmt: skip
        return plots.plot_gaps(None, per_k.results)
    one = run_sweep(
        run, keep_versions=keep_versions[:1], max_preempts=max_preempts[:1], loop=loop,
        what_if=what_if, draws=draws, seed=seed,
    )  # fmt: skip
    single = one.results[0]
    assert isinstance(single, LoopSetting)  # a run folder's sweep keeps its settings
    return plots.plot_spans(single, single) if kind == "spans" else plots.plot_timeline(single)


def run_plot_k(run: RunLog) -> int:
    """The K a single-setting figure of a run folder draws when none is given: the run's
    own, as its staleness metrics tell; a one-line refusal when they do not."""
    told = keep_versions_told(run.metrics)
    if told is None:
        raise ConfigError(
            "the run's staleness metrics do not tell its "
            + setting("keep_versions")
            + ", and a spans or timeline figure draws one setting; give it"
        )
    return told


def _check_plot(
    kind: str, keep_versions: Sequence[int], max_preempts: Sequence[int | None]
) -> None:
    if kind not in plots.PLOT_KINDS:
        raise ConfigError(f"unknown plot kind {kind!r}; use one of {', '.join(plots.PLOT_KINDS)}")
    if not keep_versions:
        raise ConfigError("give at least one " + setting("keep_versions") + " value to plot")
    if not max_preempts:
        raise ConfigError(
            "give at least one " + setting("max_preempts") + " value (or none) to plot"
        )


def build_report(
    prepared: PreparedLog,
    table: pl.DataFrame,
    inspection: LogInspection,
    *,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    batch_groups: int | None = None,
    title: str = "dressage-replay report",
    progress: Callable[[int, int], None] | None = None,
    say: Callable[[str, str | None], str] | None = None,
    inputs: Sequence[str | Path] = (),
    command: str | None = None,
    version: str | None = None,
    written_at: datetime | None = None,
    policies: Sequence[Any] = (),
    run: RunLog | None = None,
    what_if: WhatIf = "model",
    draws: int = MODEL_DRAWS,
    seed: int = 0,
) -> str:
    """The report as one HTML document: :func:`report_content`, rendered by
    :func:`analysis.views.report.render_report` (see there for the header's arguments).
    ``policies`` (:mod:`analysis.rules.policies`) adds a section comparing them
    (docs/semantics.md §13). With ``run`` (the run folder that ``prepared`` was read
    from), the settings are replayed on Dressage's own loop (:func:`run_report_content`)."""
    if run is not None:
        content = run_report_content(
            run, prepared, keep_versions=keep_versions, max_preempts=max_preempts,
            progress=progress, policies=policies, what_if=what_if, draws=draws, seed=seed,
        )  # fmt: skip
    else:
        content = report_content(
            prepared, table, keep_versions=keep_versions, max_preempts=max_preempts,
            batch_groups=batch_groups, progress=progress, policies=policies,
            formats=(*inspection.formats, *inspection.converted_from),
        )  # fmt: skip
    return render_report(
        prepared, inspection, content, keep_versions=keep_versions, max_preempts=max_preempts,
        batch_groups=batch_groups, title=title, say=say, inputs=inputs, command=command,
        version=version, written_at=written_at,
    )  # fmt: skip


def make_plot(
    kind: str,
    prepared: PreparedLog,
    *,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    batch_groups: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Figure:
    """Run the replays a kind of plot needs and draw it.

    ``sweep`` and ``heatmap`` sweep every (K, M); ``spans`` and ``timeline`` replay the
    first K and first M; ``gaps`` replays each K with the first M. ``progress(done,
    total)`` is called after each replay of a sweep.
    """
    _check_plot(kind, keep_versions, max_preempts)
    if kind in ("sweep", "heatmap"):
        result = sweep(
            prepared,
            keep_versions=keep_versions,
            max_preempts=max_preempts,
            batch_groups=batch_groups,
            progress=progress,
        )
        return plots.plot_sweep(result) if kind == "sweep" else plots.plot_heatmap(result)
    if kind == "gaps":
        configs = [
            ReplayConfig(keep_versions=k, max_preempts=max_preempts[0], batch_groups=batch_groups)
            for k in keep_versions
        ]
        return plots.plot_gaps(prepared, SettingReplays(prepared, configs))  # one at a time
    config = ReplayConfig(
        keep_versions=keep_versions[0], max_preempts=max_preempts[0], batch_groups=batch_groups
    )
    single = replay(prepared, config)
    return plots.plot_spans(prepared, single) if kind == "spans" else plots.plot_timeline(single)
