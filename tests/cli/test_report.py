"""`dressage-replay report`: one self-contained HTML file that renders in a real browser."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app

runner = CliRunner()
SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "rollouts.jsonl"


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("report") / "report.html"
    result = runner.invoke(
        app, ["report", str(SAMPLE), "-o", str(target), "-k", "0..3", "-m", "none,0..2"]
    )
    assert result.exit_code == 0, result.stderr
    return target


def test_report_is_self_contained(report_file: Path) -> None:
    text = report_file.read_text()
    assert text.startswith("<!DOCTYPE html>")
    # No network: no external scripts, styles or images.
    assert not re.search(r"""(src|href)=['"](https?:)?//""", text)
    assert text.count("<img ") == 5 and text.count("data:image/png;base64,") == 5
    for section in ("The log", "Settings compared", "Figures", "Who gets dropped"):
        assert f">{section}" in text
    settings = text[text.index(">Settings compared") : text.index(">Figures")]
    assert settings.count("<tr class=") == 4 * 4  # one sweep row per (K, M)
    assert "Pareto-efficient" in text
    assert "the Pareto-efficient setting with a control on that keeps the most tokens" in text


def test_report_says_when_it_falls_back_to_the_first_setting(tmp_path: Path) -> None:
    """With both controls off in every setting, none is 'Pareto-efficient with a control
    on': the report once said the first setting was."""
    target = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(SAMPLE), "-o", str(target), "-k", "0", "-m", "none"])
    assert result.exit_code == 0, result.stderr
    text = target.read_text()
    assert "K=0, M=none, B=4: the first setting (no setting with a control on was swept)" in text
    assert "with a control on that keeps the most tokens" not in text


def test_report_refuses_other_extensions_and_inputs(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(SAMPLE), "-o", str(tmp_path / "r.txt")])
    assert result.exit_code == 8 and ".html" in result.stderr
    assert list(tmp_path.iterdir()) == []
    copy = tmp_path / "log.html"
    shutil.copy(SAMPLE, copy)
    result = runner.invoke(app, ["report", str(copy), "-o", str(copy)])
    assert result.exit_code == 8 and "refusing" in result.stderr


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_renders_in_chromium(report_file: Path, tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (Debian package 'chromium'; .ci/run installs it)")
    command = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
        "--virtual-time-budget=5000", "--dump-dom", report_file.as_uri(),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    body = re.search(r"<body[^>]*>", done.stdout)
    assert body is not None, done.stdout[:500]
    assert 'data-figures="5"' in body.group(0)
    assert 'data-figures-loaded="5"' in body.group(0)
    assert "data-errors" not in body.group(0)
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line]
    assert console == []
