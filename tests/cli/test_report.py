"""`dressage-replay report`: one self-contained HTML file that renders in a real browser."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

import analysis
from cli.app import app
from cli.render import _NOT_PROBLEMS

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
    assert (
        len(Page.of(report_file).table("Sweep (shares in %) on the simple loop").rows) == 4 * 4
    )  # per (K, M)
    assert "Pareto-efficient" in text
    assert (
        "the Pareto-efficient setting with a control on where each control on acts "
        "(K drops, M rejects), both controls on before one, then the most tokens kept" in text
    )


def test_report_says_when_it_falls_back_to_the_first_setting(tmp_path: Path) -> None:
    """With both controls off in every setting, none is 'Pareto-efficient with a control
    on': the report once said the first setting was."""
    target = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(SAMPLE), "-o", str(target), "-k", "0", "-m", "none"])
    assert result.exit_code == 0, result.stderr
    text = target.read_text()
    assert "K=0, M=none, B=4: the first setting (no setting with a control on was swept)" in text
    assert "where each control on acts" not in text


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


@dataclass
class Table:
    caption: str = ""
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)

    def column(self, header: str) -> list[str]:
        return [row[self.headers.index(header)] for row in self.rows]

    def facts(self) -> dict[str, str]:
        """A two-column table without headers as name -> value."""
        return {row[0]: row[1] for row in self.rows}


class Page(HTMLParser):
    """What the tests read of a report: element ids, links, tables and the header's text."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.links: list[str] = []
        self.tables: list[Table] = []
        self.header = ""
        self._open: list[str] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._in: set[str] = set()

    @classmethod
    def of(cls, path: Path) -> Page:
        page = cls()
        page.feed(path.read_text(encoding="utf-8"))
        return page

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.append(str(found["id"]))
        if tag == "a" and found.get("href"):
            self.links.append(str(found["href"]))
        if tag in ("header", "thead", "caption"):
            self._in.add(tag)
        if tag == "table":
            self.tables.append(Table())
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append("\n")

    def handle_endtag(self, tag: str) -> None:
        self._in.discard(tag)
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            table = self.tables[-1]
            if "thead" in self._in:
                table.headers = self._row
            else:
                table.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if "header" in self._in:
            self.header += data + " "
        if self._cell is not None:
            self._cell.append(data)
        elif "caption" in self._in:
            self.tables[-1].caption += data

    def table(self, caption: str) -> Table:
        (found,) = [table for table in self.tables if table.caption == caption]
        return found

    def about(self) -> dict[str, str]:
        return self.tables[0].facts()


def test_report_header_says_what_it_describes(report_file: Path) -> None:
    """Two runs' reports could not be told apart: no inputs, settings, version or date."""
    about = Page.of(report_file).about()
    assert about["input"] == str(SAMPLE)
    assert about["K (keep versions)"] == "0, 1, 2, 3"
    assert about["M (max preempts)"] == "none, 0, 1, 2"
    assert about["B (batch groups)"] == "inferred: 4"
    assert about["dressage-replay version"] == version("dressage-replay")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", about["written (UTC)"])
    assert about["to reproduce"] == shlex.join(
        ["dressage-replay", "report", str(SAMPLE), "-o", str(report_file),
         "-k", "0..3", "-m", "none,0..2"]
    )  # fmt: skip
    title = re.search(r"<title>(.*)</title>", report_file.read_text())
    assert title is not None and title.group(1) == "dressage-replay report: rollouts.jsonl"


def test_report_header_command_reproduces_the_report(tmp_path: Path) -> None:
    """Options given are in the command (B given is shown as given); running it writes the
    same report but for the time of writing."""
    target = tmp_path / "with space.html"
    arguments = ["report", str(SAMPLE), "-o", str(target), "-k", "1", "-m", "none,1", "-b", "3",
                 "--order-by", "trainer_step", "--on-bad-record", "skip", "-q"]  # fmt: skip
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.stderr
    first = target.read_text()
    about = Page.of(target).about()
    assert about["B (batch groups)"] == "3"
    command = shlex.split(about["to reproduce"])
    assert command[:2] == ["dressage-replay", "report"]
    assert command[2:] == [arg for arg in arguments[1:] if arg != "-q"]
    target.rename(tmp_path / "first.html")  # (an output that exists is refused)
    result = runner.invoke(app, command[1:])
    assert result.exit_code == 0, result.stderr
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
    assert stamp.sub("T", target.read_text()) == stamp.sub("T", first)


def test_report_uses_the_command_lines_names(report_file: Path) -> None:
    """Outcome names and the bias table's column order as `replay`, `sweep` and the
    who-gets-dropped table print them (cli/render.py)."""
    page = Page.of(report_file)
    sweep = page.table("Sweep (shares in %) on the simple loop")
    assert sweep.headers == [
        "", "K", "M", "groups kept", "samples kept", "tokens kept", "stale, arrival",
        "stale, pending", "span rejected", "groups failed", "batches", "gap mean", "gap max",
        "span mean", "span max",
    ]  # fmt: skip
    # Shares to one decimal, as `sweep` prints them.
    assert all(re.fullmatch(r"\d+\.\d", share) for share in sweep.column("tokens kept"))
    (bias,) = [table for table in page.tables if table.headers[:1] == ["outcome"]]
    assert bias.headers == [
        "outcome", "groups", "trajectories", "tokens per traj. mean", "tokens per traj. median",
        "segments per traj.", "reward mean", "arrival delay (versions)",
    ]  # fmt: skip
    assert bias.column("outcome") == [
        "kept", "stale, any stage", "span rejected", "failed"
    ]  # fmt: skip
    assert "dropped_stale" not in report_file.read_text()


def test_report_table_of_contents_links_resolve(report_file: Path) -> None:
    page = Page.of(report_file)
    anchors = [link.removeprefix("#") for link in page.links if link.startswith("#")]
    assert {"log", "settings", "figures", "bias"} <= set(anchors)
    assert len(anchors) >= 4 + 5  # the sections and the five figures
    assert set(anchors) <= set(page.ids)
    assert len(page.ids) == len(set(page.ids))
    text = report_file.read_text()
    assert text.index("<nav") > text.index("</header>")  # after the header, before the log
    assert text.index("</nav>") < text.index("id='log'")


def test_report_hides_what_inspect_hides() -> None:
    """The library keeps its own copy of the CLI's set (it may not import the CLI)."""
    from analysis.views.report import NOT_PROBLEMS

    assert NOT_PROBLEMS == _NOT_PROBLEMS


@pytest.fixture(scope="module")
def big_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated log of more than a thousand records over a few dozen versions."""
    folder = tmp_path_factory.mktemp("big")
    log, target = folder / "big.jsonl", folder / "big.html"
    result = runner.invoke(app, ["simulate", "-o", str(log), "--groups", "300", "--seed", "3"])
    assert result.exit_code == 0, result.stderr
    result = runner.invoke(app, ["report", str(log), "-o", str(target), "-k", "0,2", "-m", "none"])
    assert result.exit_code == 0, result.stderr
    return target


def test_report_numbers_have_thousands_separators(big_report: Path) -> None:
    """The report printed 1270 where `replay` and `inspect` print 1,270."""
    log = big_report.with_suffix(".jsonl")
    inspection = analysis.inspect_log(analysis.load_logs([log]))
    assert inspection.records >= 1000 and inspection.trajectories >= 1000
    page = Page.of(big_report)
    facts = page.table("Log").facts()
    assert facts["records"] == f"{inspection.records:,}"
    assert facts["trajectories"] == f"{inspection.trajectories:,}"
    (bias,) = [table for table in page.tables if table.headers[:1] == ["outcome"]]
    assert (
        bias.column("trajectories")[0]
        == f"{int(bias.column('trajectories')[0].replace(',', '')):,}"
    )
    assert "," in bias.column("trajectories")[0]


def test_report_hides_the_row_inspect_hides(big_report: Path) -> None:
    """Numeric version labels a sort would misorder are no data-quality problem: `inspect`
    leaves the count out and the report showed it."""
    inspection = analysis.inspect_log(analysis.load_logs([big_report.with_suffix(".jsonl")]))
    assert inspection.quality["numeric_labels_misordered_by_sorting"] > 0  # there to hide
    quality = Page.of(big_report).table("Data quality").facts()
    assert "numeric labels misordered by sorting" not in quality
    shown = {k.replace("_", " ") for k in inspection.quality if k not in _NOT_PROBLEMS}
    assert set(quality) == shown
    assert "misordered" not in big_report.read_text()
