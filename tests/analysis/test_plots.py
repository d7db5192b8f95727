"""Plots checked through the returned Figure's axes (counts, labels, values), not pixels."""

from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import analysis
from analysis.views import plots
from tests.figures import bars, offsets, xdata, ydata

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_data" / "rollouts.jsonl"
MAGIC = {".png": b"\x89PNG", ".svg": b"<svg", ".pdf": b"%PDF"}


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return analysis.load_logs([SAMPLE])


@pytest.fixture(scope="module")
def prepared(table: pl.DataFrame) -> analysis.PreparedLog:
    return analysis.prepare(table)


def no_version_log() -> analysis.PreparedLog:
    """Four groups of two trajectories with token counts but no version of any kind."""
    records = [
        {"group_index": g, "response_length": 10, "metadata": {"parent_traj_id": f"g{g}-t{t}"}}
        for g in range(4)
        for t in range(2)
    ]
    return analysis.prepare(analysis.records_to_table(records))


def all_failed_log() -> analysis.PreparedLog:
    """Every group has an aborted sample, so nothing is ever kept."""
    records = [
        {
            "group_index": g,
            "response_length": 10,
            "status": "aborted",
            "metadata": {"parent_traj_id": f"g{g}-t{t}", "dressage_end_token_version": str(g)},
        }
        for g in range(4)
        for t in range(2)
    ]
    return analysis.prepare(analysis.records_to_table(records))


def labels_have_text(ax: Any) -> None:
    assert ax.get_title().strip()
    assert ax.get_xlabel().strip()
    assert ax.get_ylabel().strip()


def legend_texts(ax: Any) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()]


def shown_texts(ax: Any) -> str:
    return " ".join(text.get_text() for text in ax.texts)


def same(a: list[float], b: list[float | None]) -> bool:
    return all(
        (y is None and math.isnan(x)) or (y is not None and x == pytest.approx(y))
        for x, y in zip(a, b, strict=True)
    )


def test_importing_plots_leaves_matplotlib_out() -> None:
    code = "import sys, analysis.views.plots; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def trend_lines(ax: Any) -> dict[str, Any]:
    """The sweep's lines over K >= 1, by legend label (K=0 markers have "_K off" labels)."""
    return {
        line.get_label(): line for line in ax.get_lines() if str(line.get_label()).startswith("M")
    }


def k_off_markers(ax: Any) -> list[Any]:
    return [line for line in ax.get_lines() if line.get_label().startswith("_K off")]


def test_sweep_has_one_kept_line_and_two_gap_lines_per_max_preempts(
    prepared: analysis.PreparedLog,
) -> None:
    result = analysis.sweep(prepared, keep_versions=[0, 1, 2, 3], max_preempts=[None, 1])
    figure = plots.plot_sweep(result)
    kept_ax, gap_ax = figure.axes
    for ax in figure.axes:
        labels_have_text(ax)
        assert "versions" in ax.get_xlabel()
    assert "% of response tokens" in kept_ax.get_ylabel()
    assert "versions" in gap_ax.get_ylabel()

    lines = trend_lines(kept_ax)
    assert list(lines) == ["M off (none)", "M=1"]
    assert legend_texts(kept_ax)[:2] == ["M off (none)", "M=1"]
    for line, m in zip(lines.values(), [None, 1], strict=True):
        rows = result.rows.filter(pl.col("max_preempts").eq_missing(m)).sort("keep_versions")
        assert list(xdata(line)) == [1, 2, 3]
        assert same(list(ydata(line)), rows["tokens_kept_pct"].to_list()[1:])
    # K=0 is one unjoined marker per M, at the K=0 row's value.
    off = k_off_markers(kept_ax)
    assert len(off) == 2 and all(list(xdata(marker)) == [0] for marker in off)
    k_off_rows = result.rows.filter(pl.col("keep_versions") == 0)
    assert same([ydata(marker)[0] for marker in off], k_off_rows["tokens_kept_pct"].to_list())

    gap_lines = [line for line in gap_ax.get_lines() if str(line.get_label()).startswith("M")]
    assert len(gap_lines) == 4 and len(k_off_markers(gap_ax)) == 4
    mean_line, max_line = gap_lines[:2]
    assert mean_line.get_linestyle() == "-" and max_line.get_linestyle() == "--"
    none_rows = result.rows.filter(pl.col("max_preempts").is_null()).sort("keep_versions")
    assert same(list(ydata(max_line)), none_rows["version_gap_max"].to_list()[1:])

    # Pareto-efficient settings are ringed, one marker per efficient row.
    (rings,) = kept_ax.collections
    assert len(offsets(rings)) == result.rows["pareto"].sum()


def test_sweep_draws_k_off_apart_from_the_k_trend(prepared: analysis.PreparedLog) -> None:
    """K=0 was joined to K=1 by a line, drawing a V that is not a trend."""
    result = analysis.sweep(prepared, keep_versions=[0, 1, 2, 3], max_preempts=[None, 0, 1])
    kept_ax, gap_ax = plots.plot_sweep(result).axes
    for ax in (kept_ax, gap_ax):
        for line in ax.get_lines():
            joined = line.get_linestyle() not in ("None", "", " ")
            assert not (joined and {0, 1} <= set(xdata(line))), line.get_label()
        assert len(k_off_markers(ax)) >= 3
    assert any("K off" in text for text in legend_texts(kept_ax))
    assert [t.get_text() for t in kept_ax.get_xticklabels()] == ["off", "1", "2", "3"]


def test_sweep_m_off_stays_visible_where_it_coincides(prepared: analysis.PreparedLog) -> None:
    """M=none hid under the M=3 line it coincides with."""
    result = analysis.sweep(prepared, keep_versions=[1, 2, 3], max_preempts=[2, None, 3])
    kept_ax, gap_ax = plots.plot_sweep(result).axes
    lines = trend_lines(kept_ax)
    m_off, others = lines.pop("M off (none)"), list(lines.values())
    assert m_off.get_marker() not in {line.get_marker() for line in others}
    assert m_off.get_linestyle() not in {line.get_linestyle() for line in others}
    assert m_off.get_zorder() > max(line.get_zorder() for line in others)
    assert "M off (none)" in legend_texts(kept_ax)
    # On the gap panel its hollow markers are drawn on top too.
    gap_lines = gap_ax.get_lines()
    m_off_gap = gap_lines[2:4]  # mean and max of the second M in the given order
    assert all(line.get_markerfacecolor() == "none" for line in m_off_gap)
    rest = gap_lines[:2] + gap_lines[4:]
    assert min(line.get_zorder() for line in m_off_gap) > max(line.get_zorder() for line in rest)


def test_sweep_with_a_single_setting(prepared: analysis.PreparedLog) -> None:
    figure = plots.plot_sweep(analysis.sweep(prepared, keep_versions=[2], max_preempts=[None]))
    kept_ax, gap_ax = figure.axes
    assert [len(xdata(line)) for line in kept_ax.get_lines()] == [1]
    assert len(gap_ax.get_lines()) == 2
    assert not k_off_markers(kept_ax)


def test_sweep_falls_back_to_samples_when_tokens_are_unknown(table: pl.DataFrame) -> None:
    no_tokens = table.with_columns(
        pl.lit(None, dtype=table.schema[name]).alias(name)
        for name in ("response_length", "loss_mask_length")
    )
    result = analysis.sweep(analysis.prepare(no_tokens), keep_versions=[0, 1], max_preempts=[None])
    kept_ax = plots.plot_sweep(result).axes[0]
    assert "% of samples" in kept_ax.get_ylabel()
    (off,) = k_off_markers(kept_ax)
    shown = [ydata(off)[0], *ydata(trend_lines(kept_ax)["M off (none)"])]
    assert same(shown, result.rows["samples_kept_pct"].to_list())


@pytest.mark.parametrize("max_preempts", [None, 0, 2])
def test_spans_bars_match_trajectory_outcomes(
    prepared: analysis.PreparedLog, max_preempts: int | None
) -> None:
    result = analysis.replay(
        prepared, analysis.ReplayConfig(keep_versions=1, max_preempts=max_preempts)
    )
    outcomes = analysis.trajectory_outcomes(prepared, result).filter(pl.col("span").is_not_null())
    everything = Counter(outcomes["span"].to_list())
    kept = Counter(outcomes.filter(pl.col("decision") == "kept")["span"].to_list())
    spans = range(min(everything), max(everything) + 1)

    (ax,) = plots.plot_spans(prepared, result).axes
    labels_have_text(ax)
    assert "versions" in ax.get_xlabel() and ax.get_ylabel().startswith("trajectories")
    assert len(ax.patches) == 2 * len(spans)
    heights = [bar.get_height() for bar in bars(ax.patches)]
    assert heights == [everything[s] for s in spans] + [kept[s] for s in spans]
    if max_preempts is None:
        assert len(ax.get_lines()) == 0
    else:
        (limit,) = ax.get_lines()
        assert f"M+1 = {max_preempts + 1}" in str(limit.get_label())
        assert xdata(limit)[0] == pytest.approx(max_preempts + 1.5)


def test_gaps_has_one_bar_series_per_keep_versions(prepared: analysis.PreparedLog) -> None:
    results = analysis.replay_many(
        prepared, [analysis.ReplayConfig(keep_versions=k) for k in (0, 1, 2)]
    )
    gaps = [
        analysis.trajectory_outcomes(prepared, r)["version_gap"].drop_nulls().to_list()
        for r in results
    ]
    values = range(min(min(g) for g in gaps), max(max(g) for g in gaps) + 1)

    (ax,) = plots.plot_gaps(prepared, results).axes
    labels_have_text(ax)
    assert "versions" in ax.get_xlabel() and "% of kept trajectories" in ax.get_ylabel()
    assert len(ax.patches) == 3 * len(values)
    # K=0 reads "off", as on the sweep plot's axis
    assert [text.split(" ")[0] for text in legend_texts(ax)] == ["K=off", "K=1", "K=2"]
    for position, series in enumerate(gaps):
        drawn = bars(ax.patches[position * len(values) : (position + 1) * len(values)])
        counts = Counter(series)
        assert [b.get_height() for b in drawn] == pytest.approx(
            [100 * counts[v] / len(series) for v in values]
        )


@pytest.mark.parametrize(("keep_versions", "index_lines"), [(0, 1), (2, 2)])
def test_timeline_panels_follow_the_batches(
    prepared: analysis.PreparedLog, keep_versions: int, index_lines: int
) -> None:
    result = analysis.replay(
        prepared, analysis.ReplayConfig(keep_versions=keep_versions, batch_groups=2)
    )
    batches = result.batches
    gap_ax, drop_ax, index_ax = plots.plot_timeline(result).axes
    for ax in (gap_ax, drop_ax, index_ax):
        assert ax.get_title().strip() and ax.get_ylabel().strip()
    assert "versions" in gap_ax.get_ylabel() and "versions" in index_ax.get_ylabel()
    assert "groups" in drop_ax.get_ylabel() and "batch" in index_ax.get_xlabel()

    mean_line, max_line = gap_ax.get_lines()
    assert same(list(ydata(mean_line)), batches["version_gap_mean"].to_list())
    assert same(list(ydata(max_line)), batches["version_gap_max"].to_list())
    assert len(drop_ax.patches) == 2 * batches.height
    heights = [bar.get_height() for bar in bars(drop_ax.patches)]
    assert heights == batches["dropped_arrival"].to_list() + batches["dropped_pending"].to_list()
    assert len(index_ax.get_lines()) == index_lines
    assert same(list(ydata(index_ax.get_lines()[0])), batches["current_version_index"].to_list())


@pytest.fixture(scope="module")
def long_run() -> tuple[analysis.PreparedLog, analysis.ReplayResult]:
    """A simulated run of about 300 batches, the size at which per-batch plots zigzag."""
    records = analysis.simulate(analysis.SimulationConfig(n_groups=1200, seed=1))
    prepared = analysis.prepare(analysis.records_to_table(list(records)))
    result = analysis.replay(prepared, analysis.ReplayConfig(keep_versions=2, max_preempts=1))
    assert result.batches.height >= 250
    return prepared, result


def legends_clear_of_data(figure: Any) -> None:
    """Every legend lies outside every axes' data area."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure).draw()  # type: ignore[no-untyped-call]  # matplotlib leaves it untyped
    legends = [ax.get_legend() for ax in figure.axes if ax.get_legend() is not None]
    assert legends
    for legend in legends:
        box = legend.get_window_extent()
        for ax in figure.axes:
            assert not box.overlaps(ax.get_window_extent()), legend.get_texts()[0].get_text()


def test_timeline_legends_stay_off_the_data(prepared: analysis.PreparedLog) -> None:
    result = analysis.replay(prepared, analysis.ReplayConfig(keep_versions=2, batch_groups=2))
    legends_clear_of_data(plots.plot_timeline(result))


def test_timeline_of_a_long_run_is_binned_not_a_zigzag(
    long_run: tuple[analysis.PreparedLog, analysis.ReplayResult],
) -> None:
    _, result = long_run
    batches = result.batches
    figure = plots.plot_timeline(result)
    gap_ax, drop_ax, index_ax = figure.axes
    for ax in figure.axes:
        for line in ax.get_lines():
            assert len(xdata(line)) <= plots.TIMELINE_BINS, line.get_label()
    assert gap_ax.collections, "the spread within each bin is shown as a band"
    assert "batches" in gap_ax.get_title() and "batches" in drop_ax.get_ylabel()
    # Binning keeps the totals and the extremes.
    mean_line, max_line = gap_ax.get_lines()
    assert max(ydata(max_line)) == batches["version_gap_max"].max()
    lowest, highest = batches["version_gap_mean"].min(), batches["version_gap_mean"].max()
    assert isinstance(lowest, int | float) and isinstance(highest, int | float)
    assert min(ydata(mean_line)) >= lowest
    assert max(ydata(mean_line)) <= highest
    assert len(drop_ax.patches) <= 2 * plots.TIMELINE_BINS
    arrival, pending = batches["dropped_arrival"].sum(), batches["dropped_pending"].sum()
    assert isinstance(arrival, int) and isinstance(pending, int)
    dropped = arrival + pending
    assert sum(bar.get_height() for bar in bars(drop_ax.patches)) == dropped
    current = index_ax.get_lines()[0]
    assert ydata(current)[-1] == batches["current_version_index"].max()
    legends_clear_of_data(figure)


def test_spans_of_a_long_run_use_a_log_count_axis(
    long_run: tuple[analysis.PreparedLog, analysis.ReplayResult],
) -> None:
    """On a linear axis the tail (a few dozen of 20,000 trajectories) was invisible."""
    prepared, result = long_run
    (ax,) = plots.plot_spans(prepared, result).axes
    assert ax.get_yscale() == "log" and "log" in ax.get_ylabel()
    smallest = min(bar.get_height() for bar in bars(ax.patches) if bar.get_height() > 0)
    assert ax.get_ylim()[0] < smallest


@pytest.mark.parametrize(
    ("counts", "log"), [([100, 90, 80], False), ([100, 40, 10], False), ([15000, 4000, 90], True)]
)
def test_spans_choose_log_scale_when_the_tail_is_small(counts: list[int], log: bool) -> None:
    assert plots.wants_log_counts(counts) is log


def test_heatmap_grid_and_annotations_match_the_sweep(prepared: analysis.PreparedLog) -> None:
    keep, preempts = [0, 1, 2, 3], [None, 0, 1]
    result = analysis.sweep(prepared, keep_versions=keep, max_preempts=preempts)
    figure = plots.plot_heatmap(result)
    ax, colorbar = figure.axes
    labels_have_text(ax)
    assert "versions" in ax.get_xlabel() and "% of response tokens" in colorbar.get_ylabel()
    (image,) = ax.images
    array = image.get_array()
    assert array is not None and array.shape == (len(preempts), len(keep))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["off", "1", "2", "3"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["none", "0", "1"]
    expected = [
        f"{result.rows.filter(pl.col('max_preempts').eq_missing(m), pl.col('keep_versions') == k)['tokens_kept_pct'].item():.1f}"
        for m in preempts
        for k in keep
    ]
    assert [text.get_text() for text in ax.texts] == expected
    bold = [text.get_fontweight() == "bold" for text in ax.texts]
    assert sum(bold) == result.rows["pareto"].sum()


def test_heatmap_of_an_empty_log_says_so() -> None:
    """Its cells were drawn blank: "n/a" in white on white."""
    empty = analysis.prepare(analysis.records_to_table([]))
    result = analysis.sweep(empty, keep_versions=[0, 1], max_preempts=[None], batch_groups=4)
    (ax,) = plots.plot_heatmap(result).axes
    assert "no records" in shown_texts(ax)
    assert not ax.images


AXES_PER_KIND = {"sweep": 2, "spans": 1, "gaps": 1, "timeline": 3, "heatmap": 2}


@pytest.mark.parametrize("kind", plots.PLOT_KINDS)
@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_make_plot_and_save_each_kind(
    prepared: analysis.PreparedLog, tmp_path: Path, kind: str, suffix: str
) -> None:
    figure = analysis.make_plot(
        kind, prepared, keep_versions=[1, 2], max_preempts=[2, None], batch_groups=None
    )
    assert len(figure.axes) == AXES_PER_KIND[kind]
    target = tmp_path / f"{kind}{suffix}"
    plots.save_figure(figure, target)
    data = target.read_bytes()
    assert data.startswith(MAGIC[suffix]) if suffix != ".svg" else MAGIC[suffix] in data[:2000]
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_make_plot_gaps_replays_each_keep_versions_with_the_first_max_preempts(
    prepared: analysis.PreparedLog,
) -> None:
    figure = analysis.make_plot(
        "gaps", prepared, keep_versions=[0, 1, 3], max_preempts=[1, None], batch_groups=4
    )
    (ax,) = figure.axes
    assert "M=1" in ax.get_title()
    assert [text.split(" ")[0] for text in legend_texts(ax)] == ["K=off", "K=1", "K=3"]


def test_save_figure_extension_is_case_insensitive(
    prepared: analysis.PreparedLog, tmp_path: Path
) -> None:
    figure = analysis.make_plot(
        "spans", prepared, keep_versions=[0], max_preempts=[None], batch_groups=4
    )
    plots.save_figure(figure, tmp_path / "spans.PNG")
    assert (tmp_path / "spans.PNG").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("name", ["plot.jpg", "plot"])
def test_unknown_extension_is_refused_and_leaves_no_file(
    prepared: analysis.PreparedLog, tmp_path: Path, name: str
) -> None:
    figure = analysis.make_plot(
        "spans", prepared, keep_versions=[0], max_preempts=[None], batch_groups=4
    )
    with pytest.raises(analysis.OutputError, match=r"use one of \.png, \.svg, \.pdf"):
        plots.save_figure(figure, tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_missing_folder_is_an_output_error(prepared: analysis.PreparedLog, tmp_path: Path) -> None:
    figure = analysis.make_plot(
        "spans", prepared, keep_versions=[0], max_preempts=[None], batch_groups=4
    )
    with pytest.raises(analysis.OutputError, match="does not exist"):
        plots.save_figure(figure, tmp_path / "missing" / "spans.png")


def test_unknown_kind_and_empty_settings_are_config_errors(prepared: analysis.PreparedLog) -> None:
    with pytest.raises(analysis.ConfigError, match="unknown plot kind 'pie'; use one of sweep"):
        analysis.make_plot("pie", prepared, keep_versions=[0], max_preempts=[None], batch_groups=4)
    with pytest.raises(analysis.ConfigError, match="keep_versions"):
        analysis.make_plot("spans", prepared, keep_versions=[], max_preempts=[None], batch_groups=4)
    with pytest.raises(analysis.ConfigError, match="keep_versions"):
        analysis.make_plot(
            "spans", prepared, keep_versions=[-1], max_preempts=[None], batch_groups=4
        )


def test_log_without_versions_shows_explanations_instead_of_data(tmp_path: Path) -> None:
    prepared = no_version_log()
    settings: dict[str, Any] = {
        "keep_versions": [0, 1],
        "max_preempts": [None, 0],
        "batch_groups": 2,
    }
    figures = {kind: analysis.make_plot(kind, prepared, **settings) for kind in plots.PLOT_KINDS}

    kept_ax, gap_ax = figures["sweep"].axes
    assert len(trend_lines(kept_ax)) == 2 and len(k_off_markers(kept_ax)) == 2
    assert len(gap_ax.get_lines()) == 0 and "no version gap" in shown_texts(gap_ax)
    (spans_ax,) = figures["spans"].axes
    assert len(spans_ax.patches) == 0 and "no token versions" in shown_texts(spans_ax)
    (gaps_ax,) = figures["gaps"].axes
    assert len(gaps_ax.patches) == 0 and "no version gap" in shown_texts(gaps_ax)
    timeline_gap, _, timeline_index = figures["timeline"].axes
    assert "no version gap" in shown_texts(timeline_gap)
    assert "no version observed" in shown_texts(timeline_index)
    heat_ax = figures["heatmap"].axes[0]
    assert [t.get_text() for t in heat_ax.texts] == ["100.0"] * 4

    for kind, figure in figures.items():
        plots.save_figure(figure, tmp_path / f"{kind}.png")
        assert (tmp_path / f"{kind}.png").read_bytes().startswith(b"\x89PNG")


def test_nothing_kept_shows_explanations() -> None:
    prepared = all_failed_log()
    settings: dict[str, Any] = {"keep_versions": [0], "max_preempts": [None], "batch_groups": 2}
    kept_ax, _ = analysis.make_plot("sweep", prepared, **settings).axes
    assert "nothing kept" in shown_texts(kept_ax)
    for ax in analysis.make_plot("timeline", prepared, **settings).axes:
        assert "nothing kept" in shown_texts(ax)
    (gaps_ax,) = analysis.make_plot("gaps", prepared, **settings).axes
    assert len(gaps_ax.patches) == 0
    (heat_ax, _) = analysis.make_plot("heatmap", prepared, **settings).axes
    assert [t.get_text() for t in heat_ax.texts] == ["0.0"]


def test_plot_gaps_with_no_results() -> None:
    (ax,) = plots.plot_gaps(no_version_log(), []).axes
    assert len(ax.patches) == 0 and shown_texts(ax)
