"""`--help` at 80 columns: every option's name whole, every command's summary whole."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from cli.app import app

runner = CliRunner()
COMMANDS: typer.core.TyperGroup = typer.main.get_command(app)  # type: ignore[assignment]


def _help(*args: str, width: int) -> str:
    result = runner.invoke(app, [*args, "--help"], terminal_width=width)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS.commands))
@pytest.mark.parametrize("width", [80, 100])
def test_every_option_name_is_shown_whole(name: str, width: int) -> None:
    """At 80 columns rich's boxed help cut nine of simulate's names (`--samples-per-…`)."""
    text = _help(name, width=width)
    assert "…" not in text
    command = COMMANDS.commands[name]
    for param in command.params:
        if param.param_type_name == "option" and not getattr(param, "hidden", False):
            for flag in [*param.opts, *param.secondary_opts]:
                assert flag in text.split() or f"{flag}," in text.split(), (name, flag)
    assert "<bool>" not in text  # --help and on/off options take no value


def test_the_command_list_gives_each_summary_whole_at_80_columns() -> None:
    text = _help(width=80)
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")}
    for name in COMMANDS.commands:
        assert name in lines, name
        assert not lines[name].rstrip().endswith("..."), lines[name]
        assert len(lines[name]) <= 80


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("replay", ["prime-rl:max_off_policy_steps=1", "verl-drop:max_off_policy_threshold=2"]),
        ("simulate", ["partial-rollout]"]),
    ],
)
def test_help_breaks_lines_at_spaces_only(name: str, words: list[str]) -> None:
    """click's wrapper broke after hyphens: `prime-` / `rl:max_off_policy_steps=1`."""
    text = _help(name, width=80)
    lines = [line.strip() for line in text.splitlines()]
    for word in words:
        assert any(word in line for line in lines), word
    assert "<list[str]>" not in text and "<str>" not in text  # metavars, not Python types


@pytest.mark.parametrize("name", sorted(COMMANDS.commands))
def test_help_shows_plain_metavars_not_python_types(name: str) -> None:
    """A new user met `{INPUT}...`, `INPUT <list[Path]>`, `--plot <path>`, `-m <str>`."""
    import re

    text = _help(name, width=100)
    usage = text.splitlines()[0]
    assert "{" not in usage and "}" not in usage, usage
    assert not re.search(r"<(list\[\w+\]|path|str|Path|bool)>", text), name
    for param in COMMANDS.commands[name].params:
        if param.param_type_name == "argument":  # its name alone: no type beside it
            metavar = param.metavar or (param.name or "").upper()
            assert re.search(rf"^  {re.escape(metavar)}(\.\.\.)?\s{{2,}}\S", text, re.M), metavar
            assert metavar.isupper(), metavar


def test_shell_completion_is_offered_and_completes_commands() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    text = _help(width=100)
    assert "--install-completion" in text and "--show-completion" in text
    script = Path(sys.executable).parent / "dressage-replay"
    env = {**os.environ, "_DRESSAGE_REPLAY_COMPLETE": "complete_bash",
           "COMP_WORDS": "dressage-replay plot ti", "COMP_CWORD": "2"}  # fmt: skip
    done = subprocess.run([script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["timeline"], done
