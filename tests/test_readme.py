"""The console examples of the README and the documentation site, run: what they show is
what the tool prints.

Every ```console block of README.md and of the site's pages (docs/pages/**/*.md) is a
sequence of commands (`$ ` lines, continued by a trailing backslash), each followed by the
output a terminal shows for it. Each block runs in a fresh temporary directory holding
copies of `sample_data/` and `tests/fixtures/`, with `/tmp` in its commands pointing there,
and its output is compared line by line with the page's (trailing spaces stripped). So a
change of the tool's numbers or layout fails here until the page shows the new output.

Conventions of the pages this reads:
- a line that is only `...` (or `…`) stands for any number of elided lines (zero or more;
  at the end of an output, the rest); a line ending in `...` after some text matches any
  line that starts with that text;
- a command shown with no output at all is an example of a call whose output the page
  does not show: it is run and must succeed, but its output is not compared (a command
  whose output is empty and matters would need its own statement on the page).

Only `dressage-replay` (optionally piped to `jq`, `tail` or `head`, through bash) and
`tar` extracting a fixture are run; a block with any other command is skipped, saying why.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = ROOT / "docs" / "pages"
DOCUMENTS = [README, *sorted(PAGES.rglob("*.md"))]
CONSOLE_SCRIPT = Path(sys.executable).parent / "dressage-replay"
PIPE_TOOLS = ("jq", "tail", "head")
ELISION = ("...", "…")
# Each command of a block is given this long; the largest README example (1,000 simulated
# groups to Parquet) takes a few seconds.
TIMEOUT = 120
# `/tmp` as a path of its own (`/tmp`, `/tmp/k2-m1`), not inside another path.
TMP_PATH = re.compile(r"(?<![\w./-])/tmp(?=/|\s|$)")


@dataclass
class Command:
    text: str
    expected: list[str] = field(default_factory=list)


@dataclass
class Block:
    section: str
    index: int
    commands: list[Command]
    page: str = ""
    """Where the block is: empty for the README, else the page's path under docs/pages/."""

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.section.lower()).strip("-")
        where = re.sub(r"[^a-z0-9]+", "-", self.page.removesuffix(".md").lower()).strip("-")
        return f"{where}:{slug}-{self.index}" if where else f"{slug}-{self.index}"


def _parse_block(lines: list[str]) -> list[Command]:
    commands: list[Command] = []
    continued = False
    for line in lines:
        if continued:
            commands[-1].text += " " + line.strip().removesuffix("\\").strip()
            continued = line.rstrip().endswith("\\")
        elif line.startswith("$ "):
            text = line[2:].rstrip()
            continued = text.endswith("\\")
            commands.append(Command(text.removesuffix("\\").strip()))
        elif commands:
            commands[-1].expected.append(line.rstrip())
        elif line.strip():
            raise ValueError(f"console block starts with output, not a command: {line!r}")
    for command in commands:
        while command.expected and not command.expected[-1]:
            command.expected.pop()
    return commands


def parse_readme(text: str, page: str = "") -> list[Block]:
    """The ```console blocks of a Markdown text, with the `##` section each is in."""
    blocks: list[Block] = []
    section, index = "top", 0
    lines = iter(text.splitlines())
    for line in lines:
        if line.startswith("## "):
            section, index = line[3:].strip(), 0
        elif line.startswith("```"):
            body: list[str] = []
            for inner in lines:
                if inner.strip() == "```":
                    break
                body.append(inner)
            if line.strip() == "```console":
                index += 1
                blocks.append(Block(section, index, _parse_block(body), page))
    return blocks


def _page(document: Path) -> str:
    return "" if document == README else document.relative_to(PAGES).as_posix()


BLOCKS = [
    block
    for document in DOCUMENTS
    for block in parse_readme(document.read_text(encoding="utf-8"), _page(document))
]


# ---------------------------------------------------------------------------------------
# What may run


def _stages(text: str) -> list[list[str]]:
    """The words of each stage of a pipeline; `2>&1` is kept as one word."""
    lexer = shlex.shlex(
        text.replace("2>&1", " __STDERR_TO_STDOUT__ "), posix=True, punctuation_chars=True
    )
    lexer.whitespace_split = True
    stages: list[list[str]] = [[]]
    for token in lexer:
        if token == "|":
            stages.append([])
        else:
            stages[-1].append("2>&1" if token == "__STDERR_TO_STDOUT__" else token)
    return stages


def why_not_runnable(text: str) -> str | None:
    """Why a test cannot run this command as the README shows it, or None if it can.

    A missing pipe tool (`jq`, ...) is not a reason here: such a command is skipped alone.
    """
    stages = _stages(text)
    words = [word for stage in stages for word in stage]
    if any(set(word) <= set("|&;<>()") for word in words):
        return f"`{text}` uses shell syntax other than a pipe and 2>&1"
    program = stages[0][0] if stages[0] else ""
    if program == "tar":
        if not any(word.startswith("tests/fixtures/") for word in words):
            return f"`{text}` is a tar that does not extract a fixture of tests/fixtures/"
        if len(stages) > 1:
            return f"`{text}` pipes tar"
        return None
    if program != "dressage-replay":
        return f"`{text}` runs `{program}`, not dressage-replay"
    for stage in stages[1:]:
        if not stage or stage[0] not in PIPE_TOOLS:
            return f"`{text}` pipes to `{' '.join(stage)}`, not one of {', '.join(PIPE_TOOLS)}"
    return None


def missing_tools(text: str) -> list[str]:
    """Programs this command needs that are not installed here."""
    stages = _stages(text)
    needed = [stage[0] for stage in stages[1:]]
    if len(stages) > 1 or "2>&1" in stages[0]:
        needed.append("bash")
    if stages[0][0] == "tar":
        needed.append("tar")
        flags = stages[0][1] if len(stages[0]) > 1 else ""
        if "J" in flags.lstrip("-") or "--xz" in stages[0]:
            needed.append("xz")
    return [tool for tool in needed if shutil.which(tool) is None]


# ---------------------------------------------------------------------------------------
# Running


def _environment(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{CONSOLE_SCRIPT.parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "120"
    env["LINES"] = "50"
    # Unbuffered, the merged stdout and stderr come in the order they are written, which
    # is the order a terminal shows them in (stdout is line-buffered there); the outputs
    # are then compared in order, not as sets of lines.
    env["PYTHONUNBUFFERED"] = "1"
    env["NO_COLOR"] = "1"
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CLICOLOR_FORCE"):
        env.pop(name, None)
    env["HOME"] = str(workdir)
    return env


def run(text: str, workdir: Path) -> tuple[int, list[str]]:
    """Run one README command in workdir: exit status and merged output lines."""
    text = TMP_PATH.sub(str(workdir), text)
    stages = _stages(text)
    if len(stages) == 1 and "2>&1" not in stages[0]:
        argv = stages[0]
        if argv[0] == "dressage-replay":
            argv = [str(CONSOLE_SCRIPT), *argv[1:]]
    else:
        shell_text = re.sub(
            r"^dressage-replay\b", lambda _: shlex.quote(str(CONSOLE_SCRIPT)), text.strip()
        )
        argv = ["bash", "-c", f"set -o pipefail; {shell_text}"]
    result = subprocess.run(
        argv,
        cwd=workdir,
        env=_environment(workdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    lines = [line.rstrip() for line in result.stdout.replace(str(workdir), "/tmp").splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return result.returncode, lines


# ---------------------------------------------------------------------------------------
# Comparing


def _line_matches(expected: str, actual: str) -> bool:
    for mark in ELISION:
        if expected.endswith(mark) and expected.strip() != mark:
            return actual.startswith(expected.removesuffix(mark))
    return expected == actual


def _is_gap(expected: str) -> bool:
    return expected.strip() in ELISION


def first_difference(expected: list[str], actual: list[str], start: int = 0) -> str | None:
    """None when actual is what expected shows, else a description of the first difference.

    A gap line (`...`) matches any number of lines; the comparison backtracks over where the
    gap ends, and reports the difference found along the first way tried. Line numbers in
    the description count from `start` + 1 (where `actual` begins in the whole output).
    """
    i = j = 0
    while i < len(expected):
        if _is_gap(expected[i]):
            rest = expected[i + 1 :]
            if not rest:
                return None
            starts = [k for k in range(j, len(actual) + 1) if _tail_matches(rest, actual[k:])]
            if starts:
                return None
            anchor = next(
                (k for k in range(j, len(actual)) if _line_matches(rest[0], actual[k])), None
            )
            if anchor is None:
                return f"after the elided lines, README line {rest[0]!r} is not in the output"
            difference = first_difference(rest, actual[anchor:], start + anchor)
            return f"after the elided lines: {difference}"
        if j >= len(actual):
            return f"output line {start + j + 1}: README shows {expected[i]!r}, output has ended"
        if not _line_matches(expected[i], actual[j]):
            return f"output line {start + j + 1}: README shows {expected[i]!r}, tool prints {actual[j]!r}"
        i += 1
        j += 1
    if j < len(actual):
        return f"output line {start + j + 1}: README shows nothing more, tool prints {actual[j]!r}"
    return None


def _tail_matches(expected: list[str], actual: list[str]) -> bool:
    return first_difference(expected, actual) is None


# ---------------------------------------------------------------------------------------
# The test


def _workdir(tmp_path: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "sample_data", tmp_path / "sample_data", ignore=ignore)
    shutil.copytree(ROOT / "tests" / "fixtures", tmp_path / "tests" / "fixtures", ignore=ignore)
    return tmp_path


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_readme_console_block(block: Block, tmp_path: Path) -> None:
    reasons = [reason for c in block.commands if (reason := why_not_runnable(c.text))]
    if reasons:
        pytest.skip("; ".join(reasons))
    if not CONSOLE_SCRIPT.exists():
        pytest.skip(f"no console script at {CONSOLE_SCRIPT} (install the package: make test)")
    workdir = _workdir(tmp_path)
    skipped: list[str] = []
    for command in block.commands:
        if missing := missing_tools(command.text):
            skipped.append(f"`{command.text}` (needs {', '.join(missing)})")
            continue
        status, output = run(command.text, workdir)
        shown = "\n".join(output)
        # The README shows no exit status: an example that fails is a broken example.
        assert status == 0, f"$ {command.text}\nexits with {status}; it prints:\n{shown}"
        if not command.expected:
            continue  # the README shows the call, not its output (module docstring)
        difference = first_difference(command.expected, output)
        assert difference is None, f"$ {command.text}\n{difference}\nthe tool prints:\n{shown}"
    if skipped:
        pytest.skip("the rest ran and matched; not run, tools missing: " + "; ".join(skipped))


def test_the_readme_and_the_site_have_console_examples() -> None:
    """The parser finds the examples (an empty list would pass silently), in the README
    and in the site's getting-started page, tutorial and how-to pages."""
    assert len(BLOCKS) >= 5
    pages = {block.page for block in BLOCKS}
    assert {"", "getting-started.md", "tutorial.md", "how-to/verify.md"} <= pages
    assert all(block.commands for block in BLOCKS)
    assert any(command.expected for block in BLOCKS for command in block.commands)


@pytest.mark.parametrize(
    ("expected", "actual", "matches"),
    [
        (["a", "b"], ["a", "b"], True),
        (["a", "b"], ["a", "c"], False),
        (["a"], ["a", "b"], False),
        (["a", "b"], ["a"], False),
        (["...", "c"], ["a", "b", "c"], True),
        (["...", "c"], ["c"], True),
        (["a", "..."], ["a", "b", "c"], True),
        (["a", "...", ""], ["a", "", "b", ""], True),
        (["ab..."], ["abc"], True),
        (["ab…"], ["xbc"], False),
    ],
)
def test_comparison(expected: list[str], actual: list[str], matches: bool) -> None:
    assert (first_difference(expected, actual) is None) is matches


def test_parsing_joins_continued_commands_and_splits_outputs() -> None:
    blocks = parse_readme(
        "## S\n```console\n$ dressage-replay a \\\n    --b 1\nout\n\n$ tar xJf tests/fixtures/x\n```\n"
    )
    assert [(block.id, len(block.commands)) for block in blocks] == [("s-1", 2)]
    first, second = blocks[0].commands
    assert (first.text, first.expected) == ("dressage-replay a --b 1", ["out"])
    assert (second.text, second.expected) == ("tar xJf tests/fixtures/x", [])
    assert why_not_runnable(first.text) is None and why_not_runnable(second.text) is None
    assert why_not_runnable("make demo") is not None
    assert why_not_runnable("dressage-replay a | sort") is not None
    assert why_not_runnable("dressage-replay a > out.txt") is not None
    assert why_not_runnable("dressage-replay a 2>&1 | tail -3") is None
