"""verl's rollout dumps (``trainer.rollout_data_dir``) as canonical rows (docs/semantics.md,
"Other systems' logs").

verl's trainer (``verl/trainer/ppo/ray_trainer.py`` RayPPOTrainer._log_rollout_data and
_dump_generations) writes ``{rollout_data_dir}/{global_steps}.jsonl`` once per step,
one JSON line per sample of the batch trained at that step: ``input, output, gts, score,
step`` plus the reward function's extra fields of the same length (``request_id``; a
``uid``, when a record has one, is taken as its group id). Texts are decoded; no weight
version, no token count.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from analysis.errors import LogFormatError, ReplayError, short_repr
from analysis.formats.peer_records import (
    PeerItem,
    an_object,
    empty_row,
    number,
    required_whole,
    trailing_number,
)

NAME = "verl"
KEYS = frozenset({"input", "output", "score", "step"})
NO_VERSIONS = (
    "no weight versions: staleness cannot be computed; steps only (a replay keeps every "
    "group whatever K; inspecting it says what the log can tell)"
)
LIMITS = (
    "verl rollout_data_dir: no weight versions: staleness cannot be computed; steps only",
    "trainer step: the global step that trained each record (its step field); so the "
    "number of groups per step is known, not when or under which weights they were made",
    "groups: by uid when a record has one, else the records of a step with the same input "
    "text (verl reorders a batch before it dumps it); no token counts (texts only)",
)


def file_order(path: Path) -> int | None:
    """The global step of ``{global_steps}.jsonl``."""
    return trailing_number(path.name.removesuffix(".jsonl"))


def rows(path: Path, records: Iterable[tuple[int, Any]]) -> Iterator[PeerItem]:
    groups: dict[tuple[int, str], int] = {}
    for line, record in records:
        where = f"{path}:{line}"
        try:
            sample = an_object(record, where, "a verl sample")
            row = empty_row()
            step = required_whole(sample, "step", where, "the verl sample")
            prompt = sample.get("input")
            if not isinstance(prompt, str):
                raise LogFormatError(f"{where}: input must be text (found {short_repr(prompt)})")
            uid = sample.get("uid")
            if uid is not None and (isinstance(uid, (dict, list, bool))):
                raise LogFormatError(f"{where}: uid must be text (found {short_repr(uid)})")
            # verl reorders a batch to balance sequence lengths before it is dumped, so a
            # prompt's samples need not be next to each other: one group per prompt text.
            k = groups.setdefault((step, prompt), len(groups) + 1)
            row["group_id"] = str(uid) if uid is not None else f"{step}/{k}"
            row["trajectory_id"] = str(line)
            row["trainer_step"] = step
            row["reward"] = number(sample.get("score"))
            yield line, record, row
        except ReplayError as error:
            yield line, record, error
