"""NeMo-RL's per-step training dumps as canonical rows (docs/semantics.md, "Other systems'
logs").

NeMo-RL's GRPO loops (``nemo_rl/algorithms/grpo.py``, async and sync) write
``train_data_step{N}.jsonl`` (N = step + 1) through ``Logger.log_batched_dict_as_jsonl``
(``nemo_rl/utils/logger.py``): one JSON line per sample of the trained batch, each value
a batch of one (``"rewards": [1.0]``, ``"token_ids": [[...]]``) plus ``idx``: ``content,
rewards, input_lengths, token_ids, token_loss_mask, sample_loss_mask, advantages,
generation_logprobs, prev_logprobs, idx``. No weight version, no group id: a prompt's
samples are consecutive (the batch is repeat-interleaved).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from analysis.errors import LogFormatError, ReplayError, short_repr
from analysis.formats.fields import log_prob_drift
from analysis.formats.peer_records import (
    PeerItem,
    an_object,
    empty_row,
    number,
    one,
    required,
    required_whole,
    trailing_number,
)

NAME = "nemo-rl"
KEYS = frozenset({"content", "rewards", "token_ids", "idx"})
NO_VERSIONS = (
    "no weight versions: staleness cannot be computed; steps only (a replay keeps every "
    "group whatever K; inspecting it says what the log can tell)"
)
LIMITS = (
    "NeMo-RL train dump: no weight versions: staleness cannot be computed; steps only",
    "trainer step: N of train_data_step{N}.jsonl (the step that trained each record, "
    "counted from 1)",
    "no group id: groups are consecutive records with the same prompt tokens (those before "
    "the first token in the loss)",
    "log-prob drift: generation_logprobs against prev_logprobs over the loss tokens",
)


def step_of(path: Path) -> int | None:
    """N of ``train_data_step{N}.jsonl``."""
    return trailing_number(path.name.removesuffix(".jsonl"), "train_data_step")


def rows(path: Path, records: Iterable[tuple[int, Any]]) -> Iterator[PeerItem]:
    step = step_of(path)
    previous: tuple[int, ...] | None = None
    groups = 0
    for line, record in records:
        where = f"{path}:{line}"
        try:
            row, prompt = _row(record, where, step)
            if prompt != previous:
                groups += 1
                previous = prompt
            row["group_id"] = f"{step if step is not None else path.stem}/{groups}"
            yield line, record, row
        except ReplayError as error:
            yield line, record, error


def _row(record: Any, where: str, step: int | None) -> tuple[dict[str, Any], tuple[int, ...]]:
    sample = an_object(record, where, "a NeMo-RL sample")
    row = empty_row()
    index = required_whole(sample, "idx", where, "the NeMo-RL sample")
    tokens = (
        _list(one(required(sample, "token_ids", where, "the NeMo-RL sample")), where, "token_ids")
        or []
    )
    mask = _list(one(sample.get("token_loss_mask")), where, "token_loss_mask")
    if mask is not None and len(mask) != len(tokens):
        raise LogFormatError(
            f"{where}: token_loss_mask has {len(mask):,} values but token_ids {len(tokens):,}"
        )
    first = next((i for i, flag in enumerate(mask or ()) if flag), len(tokens))
    row["trajectory_id"], row["sample_index"] = str(index), index
    row["trainer_step"] = step
    row["token_count"] = len(tokens)
    row["response_length"] = None if mask is None else sum(1 for flag in mask if flag)
    row["reward"] = number(one(sample.get("rewards")))
    rollout = _list(one(sample.get("generation_logprobs")), where, "generation_logprobs")
    trainer = _list(one(sample.get("prev_logprobs")), where, "prev_logprobs")
    row["log_prob_drift"], row["log_prob_tokens"] = log_prob_drift(
        rollout, trainer, mask, where=where
    )
    return row, tuple(tokens[:first])


def _list(value: Any, where: str, what: str) -> list[Any] | None:
    if value is None or isinstance(value, list):
        return value
    raise LogFormatError(f"{where}: {what} must be a list (found {short_repr(value)})")
