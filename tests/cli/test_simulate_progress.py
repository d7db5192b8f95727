"""``simulate`` shows its progress in groups written (on a terminal, unless --quiet)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import cli.commands.simulate as command
from cli.app import app

runner = CliRunner()


@pytest.mark.parametrize("name", ["log.jsonl", "log.parquet"])
def test_progress_counts_groups_up_to_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    seen: list[tuple[int, int]] = []
    asked: list[bool] = []

    @contextlib.contextmanager
    def bar(description: str, *, quiet: bool) -> Iterator[Any]:
        asked.append(quiet)
        yield None if quiet else (lambda done, total: seen.append((done, total)))

    monkeypatch.setattr(command, "progress_bar", bar)
    arguments = ["simulate", "-o", str(tmp_path / name), "--groups", "700", "--seed", "2"]
    result = runner.invoke(app, [*arguments, "--samples-per-prompt", "2"])
    assert result.exit_code == 0, result.output
    assert asked == [False]
    assert len(seen) > 1 and seen[-1] == (700, 700)
    done = [count for count, _ in seen]
    assert done == sorted(done) and done[0] == 0
    assert {total for _, total in seen} == {700}

    seen.clear()
    result = runner.invoke(app, [*arguments, "-o", str(tmp_path / ("q" + name)), "--quiet"])
    assert result.exit_code == 0, result.output
    assert asked == [False, True] and seen == []
