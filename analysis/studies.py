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
from analysis.engine.run_loop.replay import replay_what_if
from analysis.engine.run_loop.sweep import LoopSetting, setting_of, sweep_run
from analysis.errors import ConfigError, setting
from analysis.formats.dressage.run import RunLog
from analysis.rules.policies import sweep_policies
from analysis.views import plots
from analysis.views.bias import who_gets_dropped
from analysis.views.inspection import LogInspection
from analysis.views.report import ReportContent, render_report

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def focus_setting(result: SweepResult) -> ReplayResult | LoopSetting:
    """The setting the report looks at closely: of the Pareto-efficient settings with a
    control on, one with both controls on (as Dressage runs) before one with a single
    control, then the one that keeps the most tokens (samples when tokens are unknown);
    else the first setting. With K off the per-batch drops would be an empty panel."""
    rows = result.rows.with_row_index("position")
    kept = "tokens_kept_pct" if rows["tokens_kept_pct"].null_count() == 0 else "samples_kept_pct"
    controls = (pl.col("keep_versions") > 0).cast(pl.Int8) + pl.col(
        "max_preempts"
    ).is_not_null().cast(pl.Int8)
    candidates = (
        rows.with_columns(controls.alias("controls"))
        .filter(pl.col("pareto") & (pl.col("controls") > 0))
        .sort(["controls", kept], descending=True, maintain_order=True)
    )
    position = int(candidates["position"][0]) if candidates.height else 0
    return result.results[position]


def _is_chosen(result: SweepResult, focus: ReplayResult | LoopSetting) -> bool:
    """Whether the focus setting is Pareto-efficient with a control on (not the fallback)."""
    config = focus.config
    row = result.rows.filter(
        (pl.col("keep_versions") == config.keep_versions)
        & pl.col("max_preempts").eq_missing(config.max_preempts)
    )
    return bool(
        row.height
        and row["pareto"][0]
        and (config.keep_versions > 0 or config.max_preempts is not None)
    )


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
) -> ReportContent:
    """The replays a report shows: the sweep, the setting looked at closely
    (:func:`focus_setting`), who it drops, and ``policies`` swept on the same log."""
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
            sweep_policies(prepared, policies, batch_groups=batch_groups) if policies else None
        ),
    )


def _chosen_words(swept: SweepResult, focus: ReplayResult | LoopSetting) -> str:
    """Why the report looks closely at ``focus``, in words."""
    return (
        "the Pareto-efficient setting with a control on that keeps the most tokens, "
        "both controls on before one"
        if _is_chosen(swept, focus)
        else "the first setting (no setting with a control on is Pareto-efficient)"
        if _has_control(swept)
        else "the first setting (no setting with a control on was swept)"
    )


def run_report_content(
    run: RunLog,
    prepared: PreparedLog,
    *,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    loop: Literal["partial", "fully"] | None = None,
    progress: Callable[[int, int], None] | None = None,
    policies: Sequence[Any] = (),
) -> ReportContent:
    """A run folder's report on Dressage's own loop (docs/semantics.md §12.7): the sweep of
    :func:`sweep_run`, the setting looked at closely (the run's own when a row is, else as
    :func:`focus_setting` chooses), its replays per K;
    no who-gets-dropped (a comparison of the simple loop), the replay's decisions instead.
    ``policies`` are swept on the simple loop over ``prepared`` (the folder read as one
    log, with the run's own B), as ``sweep --policy`` does."""
    swept = sweep_run(
        run, keep_versions=keep_versions, max_preempts=max_preempts, loop=loop,
        progress=progress,
    )  # fmt: skip
    own = swept.rows.with_row_index("position").filter(pl.col("own_setting"))
    focus = swept.results[int(own["position"][0])] if own.height else focus_setting(swept)
    chosen = (
        "the run's own setting (K as its staleness metrics tell, M as its span rejections "
        "name), as replay RUN replays it"
        if own.height
        else _chosen_words(swept, focus)
    )
    return ReportContent(
        swept=swept,
        focus=focus,
        chosen=chosen,
        per_k=swept.results.where(max_preempts=focus.config.max_preempts),
        bias=None,
        policies=(
            sweep_policies(prepared, policies, batch_groups=run.target_groups) if policies else None
        ),
    )


def make_run_plot(
    kind: str,
    run: RunLog,
    *,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    loop: Literal["partial", "fully"] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Figure:
    """:func:`make_plot` for a run folder, on Dressage's own loop: ``sweep`` and
    ``heatmap`` draw :func:`sweep_run`'s rows; ``spans`` and ``timeline`` the replay at
    the first K (``replay RUN -k K``); ``gaps`` each K. No M list: the run's own M."""
    _check_plot(kind, keep_versions, max_preempts or [None])
    if kind in ("sweep", "heatmap"):
        result = sweep_run(
            run, keep_versions=keep_versions, max_preempts=max_preempts, loop=loop,
            progress=progress,
        )  # fmt: skip
        return plots.plot_sweep(result) if kind == "sweep" else plots.plot_heatmap(result)
    if kind == "gaps":
        per_k = sweep_run(
            run, keep_versions=keep_versions, max_preempts=max_preempts[:1], loop=loop
        )
        return plots.plot_gaps(None, per_k.results)
    single = setting_of(run, replay_what_if(run, keep_versions=keep_versions[0], loop=loop))
    return plots.plot_spans(single, single) if kind == "spans" else plots.plot_timeline(single)


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
) -> str:
    """The report as one HTML document: :func:`report_content`, rendered by
    :func:`analysis.views.report.render_report` (see there for the header's arguments).
    ``policies`` (:mod:`analysis.rules.policies`) adds a section comparing them
    (docs/semantics.md §13). With ``run`` (the run folder that ``prepared`` was read
    from), the settings are replayed on Dressage's own loop (:func:`run_report_content`)."""
    if run is not None:
        content = run_report_content(
            run, prepared, keep_versions=keep_versions, max_preempts=max_preempts,
            progress=progress, policies=policies,
        )  # fmt: skip
    else:
        content = report_content(
            prepared, table, keep_versions=keep_versions, max_preempts=max_preempts,
            batch_groups=batch_groups, progress=progress, policies=policies,
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
