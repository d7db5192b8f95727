"""prime-rl's episode logs as canonical rows (docs/semantics.md, "Other systems' logs").

prime-rl's file monitor (``src/prime_rl/monitors/file.py`` FileMonitor.log_episodes)
appends one JSON line per episode to
``rollouts/step_{N}/{train|eval}/{all|effective}/traces.jsonl``; each line is verifiers'
``Episode.to_record()`` (``verifiers/v1/episode.py``): ``id, env{id,name}, task, group{id},
run{type,id,name,work{type,step,policy{start,end}}}, ok, errors, traces[]``, with None
fields left out. ``all`` is appended as episodes arrive (completion order), ``effective``
when batch N ships. One row per episode: an episode is one rollout of its group.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from analysis.errors import LogFormatError, MissingFieldError, ReplayError, setting, short_repr
from analysis.formats.peer_records import (
    PeerItem,
    an_object,
    at,
    count,
    empty_row,
    number,
    start_end_spans,
    trailing_number,
    whole,
)

NAME = "prime-rl"
KEYS = frozenset({"id", "task", "traces", "ok"})
"""Keys every ``Episode.to_record()`` has (the rest may be left out as None)."""
NO_VERSIONS = ""
"""(this log carries weight versions)"""
LIMITS = (
    "prime-rl episodes: one policy version at dispatch (start) and one at the end per "
    "episode, not per token; a span counts only those two",
    "trainer step: N of rollouts/step_N, the batch whose arrival window (all) or shipped "
    "batch (effective) holds the episode",
    "groups prime-rl cancelled in flight never reach the log: the in-flight cancel's drops "
    "cannot be counted, only the queue sweep's (groups in all but not in effective)",
)


def step_of(path: Path) -> int | None:
    """N of ``step_N/<kind>/<subset>/traces.jsonl``, None when the path is not so laid out."""
    parents = path.parents
    if len(parents) < 3:
        return None
    return trailing_number(parents[2].name, "step_")


def subset_of(path: Path) -> str | None:
    """``all`` or ``effective`` from the path, None when it says neither."""
    name = path.parent.name
    return name if name in ("all", "effective") else None


def rows(path: Path, records: Iterable[tuple[int, Any]]) -> Iterator[PeerItem]:
    step = step_of(path)
    for line, record in records:
        where = f"{path}:{line}"
        try:
            yield line, record, _row(record, where, step)
        except ReplayError as error:
            yield line, record, error


def _row(record: Any, where: str, step: int | None) -> dict[str, Any]:
    episode = an_object(record, where, "a prime-rl episode")
    row = empty_row()
    ident = episode.get("id")
    if not isinstance(ident, (str, int)) or isinstance(ident, bool):
        raise LogFormatError(
            f"{where}: a prime-rl episode's id must be text (found {short_repr(ident)})"
        )
    group = at(episode, "group.id")
    if group is None:
        raise MissingFieldError(
            f"{where}: the prime-rl episode {ident} has no group.id (an episode outside any "
            "rollout group); pass " + setting("on_bad_record", "skip") + " to leave it out"
        )
    if not isinstance(group, (str, int)) or isinstance(group, bool):
        raise LogFormatError(f"{where}: group.id must be text (found {short_repr(group)})")
    row["group_id"], row["trajectory_id"] = str(group), str(ident)
    policy = at(episode, "run.work.policy")
    if policy is not None:
        start = whole(at(episode, "run.work.policy.start"), where, "run.work.policy.start")
        end = whole(at(episode, "run.work.policy.end"), where, "run.work.policy.end")
        if start is None or end is None or end < start:
            raise LogFormatError(
                f"{where}: run.work.policy must hold whole numbers start <= end "
                f"(found {short_repr(policy)})"
            )
        row["version_spans"] = start_end_spans(start, end)
        row["end_version"] = str(end)
    ok = episode.get("ok")
    if not isinstance(ok, bool):
        raise LogFormatError(f"{where}: ok must be true or false (found {short_repr(ok)})")
    row["status"] = "completed" if ok else "aborted"
    row["trainer_step"] = step
    traces = episode.get("traces")
    if not isinstance(traces, list):
        raise LogFormatError(f"{where}: traces must be a list (found {short_repr(traces)})")
    row["response_length"], row["reward"] = _tokens_and_reward(traces, where)
    return row


def _tokens_and_reward(traces: list[Any], where: str) -> tuple[int | None, float | None]:
    """Completion tokens over every model call of every trace (None when no call says),
    and the summed weighted rewards (None when none was scored)."""
    tokens: int | None = None
    reward: float | None = None
    for trace in traces:
        if not isinstance(trace, dict):
            raise LogFormatError(f"{where}: a trace must be an object (found {short_repr(trace)})")
        calls = trace.get("calls")
        for call in calls if isinstance(calls, list) else ():
            made = count(at(call, "usage.completion_tokens"), where, "usage.completion_tokens")
            if made is not None:
                tokens = (tokens or 0) + made
        rewards = trace.get("rewards")
        for scored in rewards.values() if isinstance(rewards, dict) else ():
            score, weight = number(at(scored, "score")), number(at(scored, "weight"))
            if score is not None:
                reward = (reward or 0.0) + score * (1.0 if weight is None else weight)
    return tokens, reward
