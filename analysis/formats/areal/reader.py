"""AReaL's rollout dumps as canonical rows (docs/semantics.md, "Other systems' logs").

With ``dump_to_file``, AReaL's workflow executor (``areal/infra/workflow_executor.py``
WorkflowExecutor._dump_trajectory) appends one JSON line per sample of a finished group
to ``{fileroot}/.../rollout/{tail_version}/{task_id}.jsonl``: ``task_id, sample_idx,
seqlen, prompt_len, head_version, tail_version, reward, prompt, completion``. head and
tail are the min and max over the whole group's token versions, prompt tokens included;
the workflows give prompt tokens version -1 (``areal/workflow/rlvr.py``), so head is -1
whenever a prompt was counted. Groups are dumped before the accept filter runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from analysis.errors import LogFormatError, ReplayError
from analysis.formats.peer_records import (
    PeerItem,
    an_object,
    count,
    empty_row,
    number,
    required_whole,
    start_end_spans,
    trailing_number,
)

NAME = "areal"
KEYS = frozenset({"task_id", "sample_idx", "head_version", "tail_version"})
NO_VERSIONS = ""
"""(this log carries weight versions)"""
LIMITS = (
    "AReaL rollout dump: one head and one tail version per group (min and max over all its "
    "tokens), not per trajectory: each trajectory is given its group's tail as end version",
    "head_version is -1 whenever prompt tokens are counted (AReaL gives them version -1): "
    "for those groups the start version is unknown, only the end (tail) is known, so the "
    "version span and any rule on start versions cannot be computed",
    "no trainer step: which step consumed a group cannot be told, and groups AReaL's "
    "accept filter rejected are dumped too",
    "arrival order: by tail version, then task id (the files carry no completion time)",
)


def file_order(path: Path) -> tuple[int, int] | None:
    """(tail version, task id) from ``rollout/{tail_version}/{task_id}.jsonl``."""
    tail = trailing_number(path.parent.name)
    task = trailing_number(path.name.removesuffix(".jsonl"))
    return None if tail is None or task is None else (tail, task)


def rows(path: Path, records: Iterable[tuple[int, Any]]) -> Iterator[PeerItem]:
    for line, record in records:
        where = f"{path}:{line}"
        try:
            yield line, record, _row(record, where)
        except ReplayError as error:
            yield line, record, error


def _row(record: Any, where: str) -> dict[str, Any]:
    sample = an_object(record, where, "an AReaL sample")
    row = empty_row()
    what = "the AReaL sample"
    task = required_whole(sample, "task_id", where, what)
    index = required_whole(sample, "sample_idx", where, what)
    head = required_whole(sample, "head_version", where, what)
    tail = required_whole(sample, "tail_version", where, what)
    if head < -1 or tail < head or tail < 0:
        raise LogFormatError(
            f"{where}: head_version {head} and tail_version {tail} must satisfy "
            "-1 <= head <= tail and tail >= 0"
        )
    row["group_id"], row["trajectory_id"] = str(task), str(index)
    row["sample_index"] = index
    row["end_version"] = str(tail)
    if head >= 0:  # no prompt token was counted: head is the group's first version
        row["version_spans"] = start_end_spans(head, tail)
    seqlen = count(sample.get("seqlen"), where, "seqlen")
    prompt = count(sample.get("prompt_len"), where, "prompt_len")
    if seqlen is not None and prompt is not None:
        if prompt > seqlen:
            raise LogFormatError(f"{where}: prompt_len {prompt:,} is longer than seqlen {seqlen:,}")
        row["response_length"] = seqlen - prompt
    row["reward"] = number(sample.get("reward"))
    return row
