"""The command line's shape: shared options declared once and received as one value that
knows what was given, commands of few parameters, and only the public API imported."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import analysis
from cli.app import app
from cli.commands.replay import replay
from cli.groups import READ, ReadFlags, reads_logs

CLI = Path(__file__).resolve().parents[2] / "cli"
SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "rollouts.jsonl"
runner = CliRunner()


def _commands() -> dict[str, Any]:
    return {info.callback.__name__: info.callback for info in app.registered_commands}  # type: ignore[union-attr]


@pytest.mark.parametrize("name", sorted(_commands()))
def test_no_command_has_more_than_ten_parameters_of_its_own(name: str) -> None:
    """Shared options come as one group (``read``, ``pipeline``): a command's own
    parameters, the group counted once, stay few."""
    command = inspect.unwrap(_commands()[name])
    own = [p for p in inspect.signature(command).parameters if p != "ctx"]
    assert len(own) <= 12, own  # replay: 10, its read group and its run-loop group


def test_the_command_line_imports_only_the_public_api() -> None:
    """``import analysis`` or ``from analysis import ...``: a need past it is a gap in the
    API. (render's k_label/m_label wait for the layering work to give them a home.)"""
    past: list[str] = []
    for path in sorted(CLI.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            past += [
                f"{path.relative_to(CLI)}: {module}"
                for module in modules
                if module.startswith("analysis.")
            ]
    assert past == []


def test_given_is_what_the_parser_saw(tmp_path: Path) -> None:
    """An option given as its default value is given; one left out is not."""
    seen: list[ReadFlags] = []

    @reads_logs()
    def command(inputs: list[Path], read: ReadFlags = READ) -> None:
        seen.append(read)

    import typer

    probe = typer.Typer()
    probe.command()(command)
    probe.command("other")(lambda: None)
    result = runner.invoke(probe, ["command", str(SAMPLE), "--on-bad-record", "fail", "-q"])
    assert result.exit_code == 0, result.output
    (read,) = seen
    assert read.given == {"inputs", "on_bad_record", "quiet"}
    assert read.quiet and read.on_bad_record == "fail" and read.field is None


def test_policy_beside_a_given_k_is_refused_even_at_its_default() -> None:
    """`-k 0` is given: the parser says so, whatever its value."""
    result = runner.invoke(app, ["replay", str(SAMPLE), "-k", "0", "--policy", "prime-rl"])
    assert result.exit_code == 2
    assert "give K and M inside the policy" in result.stderr


def test_replay_is_the_library_call() -> None:
    """The command's signature names the group once; the library picks the engine."""
    assert "read" in inspect.signature(inspect.unwrap(replay)).parameters
    assert analysis.picks_run_loop([SAMPLE], analysis.ReadOptions()) is False
