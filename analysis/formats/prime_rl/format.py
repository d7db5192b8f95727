"""prime-rl's episode logs as a format: ``rollouts/step_N/train/all/traces.jsonl``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from analysis.formats.peer_records import numbered_files, trailing_number
from analysis.formats.peers import PeerFormat
from analysis.formats.prime_rl import reader


def tree(
    root: Path, told: str | None, probe: Callable[[Path], str | None]
) -> tuple[list[Path], str] | None:
    """One step folder (``step_N/``), or a folder of them (``rollouts/``, or its parent)."""
    one_step = root / "train/all/traces.jsonl"
    if trailing_number(root.name, "step_") is not None and one_step.is_file():
        return [one_step], (
            f"{root}: one step of prime-rl rollouts: read train/all/traces.jsonl; the "
            "effective and eval subsets are not read (pass their files to read them instead)"
        )
    for base in (root, root / "rollouts"):
        found = sorted(base.glob("step_*/train/all/traces.jsonl"))
        if found:
            return numbered_files(found, reader.step_of), (
                f"{base}: prime-rl rollouts: read step_*/train/all/traces.jsonl (every "
                "episode that arrived, in completion order); the effective and eval "
                "subsets are not read (pass their files to read them instead)"
            )
    return None


FORMAT = PeerFormat.of(
    reader,
    described="a prime-rl log",
    users_name="prime-rl",
    file_order=reader.step_of,
    tree=tree,
    step_offset=1,  # prime-rl's batch `step` trains version step - 1
)

FORMATS = (FORMAT,)
