"""Attempt identity without a start rollout (docs/semantics.md §12.1): Dressage's
fully-async loop annotates nothing, so the epochs and retries of one prompt share an
instance id and differ only in their retry count. Trajectories are told apart from what
the files do say: slime's ``group_index`` of a draw (kept samples in the dumps, failed ones
in ``error.json``), the earlier session a retried sample names, and finish times (the
trajectories of one attempt run together, ``samples_per_prompt`` of them).

Then, for either loop, the attempts themselves: the facts the dumps add to their
trajectories, each attempt's sample order, draw and completion, and the attempts left
short of trajectories when ``traj_err/`` is missing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from analysis.formats.dressage.log import DressageLog
from analysis.formats.dressage.records import attempt_label
from analysis.formats.dressage.sessions import Trajectory

LOG = "dressage_log.txt"


def detect_loop(
    log: DressageLog | None, trajectories: list[Trajectory], dumps: list[dict[str, Any]]
) -> tuple[str | None, str]:
    """Which of Dressage's loops made the run, and what says so (docs/semantics.md §12.4):
    the log's worker line or its loggers' names, else the partial loop's annotations in
    the samples or dumps; None when nothing tells."""
    if log is not None and log.loop is not None:
        return log.loop, f"{LOG} line {log.loop_line} is the {log.loop} loop's"
    if any(t.start_rollout_id is not None for t in trajectories):
        return "partial", "its samples carry dressage_start_rollout_id (partial loop annotations)"
    if any(row["async_group_id"] is not None for row in dumps):
        return (
            "partial",
            "its dumps carry dressage_return_async_group_id (partial loop annotations)",
        )
    return None, "nothing in the files tells (no worker or loop line in the log, no annotations)"


def tell_attempts_apart(
    trajectories: list[Trajectory], samples_per_prompt: int | None, warnings: list[str]
) -> int:
    """When no trajectory carries a start rollout, give each its draw ordinal and retry
    count (:func:`partition_without_start`); the number of attempts told apart by finish
    times alone where they could interleave, said in a warning."""
    if not all(t.start_rollout_id is None for t in trajectories):
        return 0
    draws, ambiguous = partition_without_start(trajectories, samples_per_prompt)
    for t in trajectories:
        t.draw, t.retry_count = draws[t.trajectory_id]
    if ambiguous:
        warnings.append(
            f"{ambiguous} attempt(s) of a repeated prompt are told apart by finish times "
            "alone (no start rollout, group_index or retried session names them) where "
            "their times could interleave: their trajectories may belong to the other attempt"
        )
    return ambiguous


@dataclass
class _Piece:
    """Trajectories known to be one attempt (same draw, same retry count)."""

    members: list[Trajectory]
    draw: int  # union-find node of its draw
    retry: int

    @property
    def first(self) -> float:
        return min(t.finished_at for t in self.members)

    @property
    def last(self) -> float:
        return max(t.finished_at for t in self.members)


@dataclass
class _Draws:
    """Union-find over draws, each with the ``group_index`` it is known by (if any)."""

    parent: list[int] = field(default_factory=list)
    index: list[int | None] = field(default_factory=list)

    def new(self, group_index: int | None = None) -> int:
        self.parent.append(len(self.parent))
        self.index.append(group_index)
        return len(self.parent) - 1

    def find(self, node: int) -> int:
        while self.parent[node] != node:
            self.parent[node] = self.parent[self.parent[node]]
            node = self.parent[node]
        return node

    def compatible(self, a: int, b: int) -> bool:
        x, y = self.index[self.find(a)], self.index[self.find(b)]
        return x is None or y is None or x == y

    def union(self, a: int, b: int) -> int:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[b] = a
            if self.index[a] is None:
                self.index[a] = self.index[b]
        return a


def partition_without_start(
    trajectories: list[Trajectory], samples_per_prompt: int | None
) -> tuple[dict[str, tuple[int, int]], int]:
    """Each trajectory's (draw ordinal of its prompt, retry count), and how many attempts
    were told apart by finish times alone where their times could interleave.

    The draw ordinal counts a prompt's draws in order of their first finish (0, 1, ...).
    """
    size = samples_per_prompt or 1
    by_instance: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        by_instance.setdefault(t.instance_id, []).append(t)
    keys: dict[str, tuple[int, int]] = {}
    ambiguous = 0
    for members in by_instance.values():
        found, unsure = _partition_prompt(members, size)
        keys.update(found)
        ambiguous += unsure
    return keys, ambiguous


def _partition_prompt(
    members: list[Trajectory], size: int
) -> tuple[dict[str, tuple[int, int]], int]:
    draws, node = _known_draws(members)
    pieces_by_key: dict[tuple[int, int], list[Trajectory]] = {}
    for t in members:  # what is known to be one attempt: one draw, one retry count
        pieces_by_key.setdefault((draws.find(node[t.trajectory_id]), t.retry_count), []).append(t)
    pieces = [_Piece(ts, d, r) for (d, r), ts in pieces_by_key.items()]
    attempts, unsure = _merge_pieces(pieces, draws, size)
    unsure += _attach_retries(attempts, draws)
    firsts: dict[int, float] = {}
    for attempt in attempts:
        root = draws.find(attempt.draw)
        firsts[root] = min(firsts.get(root, attempt.first), attempt.first)
    ordinal = {root: i for i, root in enumerate(sorted(firsts, key=lambda r: (firsts[r], r)))}
    keys = {
        t.trajectory_id: (ordinal[draws.find(attempt.draw)], attempt.retry)
        for attempt in attempts
        for t in attempt.members
    }
    return keys, unsure


def _known_draws(members: list[Trajectory]) -> tuple[_Draws, dict[str, int]]:
    """Each trajectory's draw node: one per ``group_index``, joined along the sessions a
    retried sample names (a retry of the same draw)."""
    draws = _Draws()
    node: dict[str, int] = {}
    by_index: dict[int, int] = {}
    for t in members:
        if t.group_index is not None and t.group_index in by_index:
            node[t.trajectory_id] = by_index[t.group_index]
        else:
            node[t.trajectory_id] = draws.new(t.group_index)
            if t.group_index is not None:
                by_index[t.group_index] = node[t.trajectory_id]
    for t in members:
        if t.retry_link is not None and t.retry_link in node:
            a, b = node[t.trajectory_id], node[t.retry_link]
            if draws.compatible(a, b):
                draws.union(a, b)
    return draws, node


def _merge_pieces(pieces: list[_Piece], draws: _Draws, size: int) -> tuple[list[_Piece], int]:
    """The pieces of one retry count merged into attempts of ``size``, in finish order;
    and how many cuts between attempts could be wrong (:func:`_could_interleave`)."""
    attempts: list[_Piece] = []
    unsure = 0
    for retry in sorted({p.retry for p in pieces}):
        current: _Piece | None = None
        for piece in sorted((p for p in pieces if p.retry == retry), key=lambda p: p.first):
            if (
                current is not None
                and len(current.members) + len(piece.members) <= size
                and draws.compatible(current.draw, piece.draw)
            ):
                current.members += piece.members
                current.draw = draws.union(current.draw, piece.draw)
                continue
            if current is not None and _could_interleave(current, piece, draws):
                unsure += 1
            current = _Piece(list(piece.members), piece.draw, retry)
            attempts.append(current)
    return attempts, unsure


def _attach_retries(attempts: list[_Piece], draws: _Draws) -> int:
    """A retry whose files name no earlier session joins the latest earlier attempt of the
    prompt, one retry count below and without a retry yet, that finished before it began;
    the number of retries with more than one such attempt."""
    unsure = 0
    for attempt in sorted(attempts, key=lambda a: (a.retry, a.first)):
        if attempt.retry == 0 or _has(attempts, draws, attempt.draw, attempt.retry - 1):
            continue
        candidates = [
            a
            for a in attempts
            if a.retry == attempt.retry - 1
            and a.last <= attempt.first
            and not _has(attempts, draws, a.draw, attempt.retry)
            and draws.compatible(a.draw, attempt.draw)
        ]
        if candidates:
            unsure += len(candidates) > 1
            attempt.draw = draws.union(max(candidates, key=lambda a: a.last).draw, attempt.draw)
    return unsure


def _has(attempts: list[_Piece], draws: _Draws, draw: int, retry: int) -> bool:
    root = draws.find(draw)
    return any(a.retry == retry and draws.find(a.draw) == root for a in attempts)


def _could_interleave(done: _Piece, nxt: _Piece, draws: _Draws) -> bool:
    """Whether two attempts of one prompt and retry count, cut apart by count and finish
    order, could have run at once (their members swapped): neither draw is known by a
    ``group_index`` and the gap between them is shorter than either one's spread."""
    if draws.index[draws.find(done.draw)] is not None and (
        draws.index[draws.find(nxt.draw)] is not None
    ):
        return False
    gap = nxt.first - done.last
    return gap < max(done.last - done.first, nxt.last - nxt.first)


def enrich_from_dumps(trajectories: list[Trajectory], dumps: list[dict[str, Any]]) -> None:
    """Dumps name what artifacts lack for kept trajectories: sample index, async group id."""
    by_id = {t.trajectory_id: t for t in trajectories}
    for row in dumps:
        if (found := by_id.get(row["trajectory_id"])) is not None:
            found.sample_index = row["sample_index"]
            found.async_group_id = row["async_group_id"]
            found.group_index = row["group_index"]


def _sample_order(members: list[Trajectory]) -> tuple[list[Trajectory], bool]:
    """Sample order of an attempt: by slime index where known; the rest after, in ascending
    numeric end version (a neutral guess: it matters only when one attempt brings two new
    labels at once)."""

    def by_version(t: Trajectory) -> tuple[int, float, str]:
        try:
            return (0, float(t.end_version or ""), t.trajectory_id)
        except ValueError:
            return (1, 0.0, str(t.end_version))

    known = sorted(
        (t for t in members if t.sample_index is not None), key=lambda t: t.sample_index or 0
    )
    unknown = sorted((t for t in members if t.sample_index is None), key=by_version)
    return known + unknown, not unknown


def build_attempts(
    trajectories: list[Trajectory], prompts: list[str] | None, warnings: list[str]
) -> list[dict[str, Any]]:
    """Group trajectories into attempts (rows of ``ATTEMPT_SCHEMA``) and give each
    trajectory its attempt id and sample position; reorders ``trajectories`` to match."""
    buckets: dict[tuple[str, int | None, int, int | None], list[Trajectory]] = {}
    for t in trajectories:
        buckets.setdefault((t.instance_id, t.start_rollout_id, t.retry_count, t.draw), []).append(t)
    attempts: dict[tuple[str, int | None, int, int | None], dict[str, Any]] = {}
    ordered: list[Trajectory] = []
    for key, members in buckets.items():
        label = attempt_label(*key)
        in_order, known = _sample_order(members)
        for position, t in enumerate(in_order):
            t.attempt_id, t.sample_position = label, position
        ordered += in_order
        group_ids = sorted({t.async_group_id for t in members if t.async_group_id is not None})
        if len(group_ids) > 1:
            warnings.append(
                f"attempt {label} holds trajectories of async groups {group_ids}: two draws of "
                "one prompt in one rollout call are merged"
            )
        kinds = [t.fail_kind for t in members if t.fail_kind is not None]
        indices = [t.group_index for t in members if t.group_index is not None]
        attempts[key] = {
            "attempt_id": label,
            "instance_id": key[0],
            "start_rollout_id": key[1],
            "retry_count": key[2],
            "completed_at": max(t.finished_at for t in members),
            "retry_of": attempt_label(key[0], key[1], key[2] - 1, key[3])
            if (key[0], key[1], key[2] - 1, key[3]) in buckets
            else None,
            "draw": min(indices) if indices else None,
            "fail_kind": ("span" if "span" in kinds else kinds[0]) if kinds else None,
            "span_verdict": any(t.span_marker for t in members),
            "async_group_id": group_ids[0] if group_ids else None,
            "trajectories": len(members),
            "order_known": known,
            "incomplete": False,
        }
    _assign_draws(attempts, prompts)
    trajectories[:] = ordered
    return list(attempts.values())


def _assign_draws(
    attempts: dict[tuple[str, int | None, int, int | None], dict[str, Any]],
    prompts: list[str] | None,
) -> None:
    """Dataset draw ordinal (slime ``group_index``) of every attempt whose files lack it.

    Prompts are drawn in ``prompts.jsonl`` order, epoch after epoch: an instance's k-th
    first attempt (by start rollout) has ordinal k * P + its position. Retries keep
    their draw; a known ``group_index`` wins.
    """
    order = prompts or sorted({key[0] for key in attempts})
    position = {instance: i for i, instance in enumerate(order)}
    firsts: dict[str, list[tuple[str, int | None, int, int | None]]] = {}
    for key, row in attempts.items():
        if row["retry_of"] is None:
            firsts.setdefault(key[0], []).append(key)
    for instance, keys in firsts.items():
        keys.sort(
            key=lambda k: (
                -1 if k[1] is None else k[1],
                -1 if k[3] is None else k[3],
                attempts[k]["completed_at"],
            )
        )
        for epoch, key in enumerate(keys):
            if attempts[key]["draw"] is None:
                attempts[key]["draw"] = epoch * len(order) + position.get(instance, 0)
    for key in sorted(attempts, key=lambda k: k[2]):
        row = attempts[key]
        earlier = attempts.get((key[0], key[1], key[2] - 1, key[3]))
        if row["draw"] is None and earlier is not None:
            row["draw"] = earlier["draw"]


def mark_incomplete(
    attempts: list[dict[str, Any]], samples_per_prompt: int | None, warnings: list[str]
) -> None:
    """Without ``traj_err/``, an attempt with fewer than n trajectories failed (kind unknown)."""
    if samples_per_prompt is None:
        return
    short = [row for row in attempts if row["trajectories"] < samples_per_prompt]
    for row in short:
        row["fail_kind"] = "other"
        row["incomplete"] = True
    if short:
        warnings.append(
            f"no traj_err/: {len(short)} attempt(s) with fewer than {samples_per_prompt} "
            "trajectories are taken as failed of unknown kind (reported as 'other'); their "
            "failed trajectories, span rejections and failure kinds cannot be known"
        )
