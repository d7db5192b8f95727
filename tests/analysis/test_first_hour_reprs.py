"""What a notebook shows of a run folder and of a loaded log (issue 33): one line, with
the tables behind ``_repr_html_``."""

from __future__ import annotations

from pathlib import Path

import pytest

import analysis


def test_a_run_and_a_loaded_log_have_short_reprs(
    run_folders: dict[str, Path], small_logs: dict[str, Path]
) -> None:
    run = analysis.read_run(run_folders["k2-m1"])
    loaded = analysis.load_log(small_logs["jsonl"])
    for value in (run, loaded):
        assert len(repr(value)) < 200, type(value).__name__
        assert "<table" in value._repr_html_()
    assert f"{run.attempts.height} attempts" in repr(run)
    assert f"{run.trainer_steps} trainer steps" in repr(run) and run.trainer_steps > 1
    assert f"{loaded.table.height} records" in repr(loaded)


@pytest.mark.parametrize("kind", ["sweep", "heatmap", "spans", "gaps", "timeline"])
def test_every_figure_says_where_it_came_from(
    kind: str, small_logs: dict[str, Path], tmp_path: Path
) -> None:
    """A PNG pasted into a document keeps its input, setting, B and the tool's version."""
    from analysis.views._figures import provenance

    log = small_logs["jsonl"]
    prepared = analysis.prepare(analysis.load_logs([log]))
    figure = analysis.make_plot(
        kind, prepared, keep_versions=[1, 2], max_preempts=[1], batch_groups=3
    )
    analysis.save_figure(figure, tmp_path / "figure.png", inputs=[log], version="9.9")
    line = provenance(figure, [log], "9.9")
    assert log.name in line and "B=3" in line and "dressage-replay 9.9" in line
    assert "K=1" in line and "M=1" in line
    assert [text.get_text() for text in figure.texts].count(line) == 1
    figure.canvas.draw()  # the line is below every panel, not over one
    (stamp,) = [text for text in figure.texts if text.get_text() == line]
    box = stamp.get_window_extent()
    panels = [ax.get_tightbbox() for ax in figure.axes if ax.get_label() != "<colorbar>"]
    assert all(panel is not None and box.y1 <= panel.y0 + 1 for panel in panels)
    if kind == "heatmap":
        assert "B=3" in figure.axes[0].get_title()
