"""Staleness policies as first-class objects: Dressage's (K, M) and the batch-assembly rules
of prime-rl, verl v1 and NeMo-RL, replayed over one prepared log and compared on the same
axes (docs/semantics.md §13).

>>> import analysis
>>> from analysis.rules.policies import parse_policy, replay_policy
>>> table = analysis.records_to_table([
...     {"group_index": g, "metadata": {"parent_traj_id": "t", "dressage_end_token_version": v}}
...     for g, v in enumerate(["a", "b", "c", "a", "c"])
... ])
>>> result = replay_policy(table, parse_policy("prime-rl:max_off_policy_steps=1"), batch_groups=2)
>>> result.decisions["decision"].to_list()  # the 2nd 'a' arrives when 'c' is newest: lag 2
['kept', 'kept', 'kept', 'dropped_stale', 'kept']
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import polars as pl

from analysis.engine.config import ReplayConfig
from analysis.engine.grid import SWEEP_SCHEMA, pareto_front, sweep_row
from analysis.engine.prepare import PreparedLog, prepare
from analysis.engine.results import ReplayResult, replay, resolve_config
from analysis.engine.summary import ReplaySummary, summarise
from analysis.rules.peer_policies import collect_peer, start_index
from analysis.rules.spec import (
    POLICIES,
    DressagePolicy,
    NemoWindowedPolicy,
    PeerPolicy,
    Policy,
    PrimeRLPolicy,
    VerlDropPolicy,
    known_policies,
    parse_policy,
)

__all__ = [
    "POLICIES",
    "POLICY_SWEEP_SCHEMA",
    "DressagePolicy",
    "NemoWindowedPolicy",
    "PeerPolicy",
    "Policy",
    "PolicyResult",
    "PolicyRow",
    "PolicySweep",
    "PrimeRLPolicy",
    "VerlDropPolicy",
    "known_policies",
    "parse_policy",
    "replay_policy",
    "sweep_policies",
]


@dataclass(frozen=True)
class PolicyResult:
    """One policy replayed over a log: the engine's result, named by its policy."""

    policy: Policy
    result: ReplayResult
    _start: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def summary(self) -> ReplaySummary:
        return self.result.summary

    def __repr__(self) -> str:
        """``PolicyResult(prime-rl:max_off_policy_steps=1, B=4: 20 of 40 groups kept, ...)``:
        the policy, not the K and M a peer rule does not have."""
        groups = self.summary.counts["groups"]
        said = [
            f"{groups['kept']:,} of {groups['total']:,} groups kept",
            f"{groups['dropped_stale']:,} dropped stale",
        ]
        if isinstance(self.policy, DressagePolicy):
            said.append(f"{groups['rejected_span']:,} rejected")
        said.append(f"{groups['failed']:,} failed")
        return (
            f"PolicyResult({self.policy.label()}, B={self.summary.config.batch_groups}: "
            f"{', '.join(said)})"
        )

    @functools.cached_property
    def decisions(self) -> pl.DataFrame:
        """The engine's decision table; for a peer rule, with the start version index the
        rule measured (``start_version_index``, docs/semantics.md §13.1)."""
        frame = self.result.decisions
        if self._start is None:
            return frame
        start = pl.Series(self._start, dtype=pl.Int64)
        return frame.with_columns(
            start_version_index=start.set(start >= _NO_VERSION_SERIES_FLOOR, None)
        )

    @property
    def batches(self) -> pl.DataFrame:
        return self.result.batches

    def to_dict(self) -> dict[str, Any]:
        """The summary's ``to_dict()`` with the policy and its knobs first; a peer rule's
        setting is its knobs and the batch size (no K, M, or Dressage metric names)."""
        figures = self.summary.to_dict()
        if isinstance(self.policy, PeerPolicy):
            figures["config"] = {"batch_groups": self.summary.config.batch_groups}
            figures.pop("dressage_metrics", None)
        return {"policy": self.policy.to_dict(), **figures}


_NO_VERSION_SERIES_FLOOR = 1 << 60  # NO_VERSION and above: a group without versions


def replay_policy(
    log: pl.DataFrame | PreparedLog,
    policy: Policy,
    *,
    batch_groups: int | None = None,
    order_by: str | None = None,
) -> PolicyResult:
    """Replay one policy over a log (prepared once; pass a PreparedLog to reuse it)."""
    prepared = log if isinstance(log, PreparedLog) else prepare(log, order_by=order_by)
    if isinstance(policy, DressagePolicy):
        return PolicyResult(policy, replay(prepared, policy.config(batch_groups)))
    if not isinstance(policy, PeerPolicy):
        raise TypeError(f"not a policy: {policy!r}")
    config = resolve_config(prepared, ReplayConfig(batch_groups=batch_groups))
    observation, collection = collect_peer(prepared, policy, config.batch_groups or 1)
    summary = summarise(prepared, config, observation, collection)
    summary = dataclasses.replace(summary, notes=summary.notes + _peer_notes(policy))
    result = ReplayResult(
        config=config,
        summary=summary,
        _prepared=prepared,
        _observation=observation,
        _collection=collection,
    )
    return PolicyResult(policy, result, _start=start_index(prepared))


def _peer_notes(policy: PeerPolicy) -> tuple[str, ...]:
    notes = []
    if isinstance(policy, VerlDropPolicy):
        notes.append(
            "verl counts staleness from the trainer step at which a prompt was submitted, "
            "which no log records; the group's start version stands in for it, so verl's own "
            "rule, counting from that earlier step, would drop at least as much (docs/semantics.md §13.1)"
        )
    return tuple(notes)


POLICY_SWEEP_SCHEMA: dict[str, Any] = {"policy": pl.String, **SWEEP_SCHEMA}


class PolicyRow(Protocol):
    """What a policy sweep keeps per row besides the row: the policy it ran (a
    :class:`PolicyResult` on the simple loop; a run folder's loop keeps its draws)."""

    @property
    def policy(self) -> Policy: ...


@dataclass(frozen=True)
class PolicySweep:
    """One row per policy setting (same columns as a sweep of K and M, plus ``policy``)."""

    rows: pl.DataFrame
    results: tuple[PolicyRow, ...]

    def __repr__(self) -> str:
        return f"PolicySweep({self.rows.height:,} policies: {', '.join(self.rows['policy'])})"


def sweep_policies(
    prepared: PreparedLog,
    policies: Sequence[Policy],
    *,
    batch_groups: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> PolicySweep:
    """Replay each policy over one prepared log; one row each, the Pareto front marked
    across them all (more tokens kept against a lower mean version gap)."""
    results = []
    for done, policy in enumerate(policies, start=1):
        results.append(replay_policy(prepared, policy, batch_groups=batch_groups))
        if progress is not None:
            progress(done, len(policies))
    rows = pl.DataFrame(
        [(r.policy.label(), *sweep_row(r.result)) for r in results],
        schema=POLICY_SWEEP_SCHEMA,
        orient="row",
    )
    rows = rows.with_columns(pareto=pl.Series(pareto_front(rows), dtype=pl.Boolean))
    peers = pl.Series([isinstance(r.policy, PeerPolicy) for r in results])
    rows = rows.with_columns(
        keep_versions=pl.when(peers).then(None).otherwise(pl.col("keep_versions")),
        max_preempts=pl.when(peers).then(None).otherwise(pl.col("max_preempts")),
    )
    return PolicySweep(rows=rows, results=tuple(results))
