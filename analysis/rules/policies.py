"""Staleness policies as first-class objects: Dressage's (K, M) and the batch-assembly rules
of prime-rl, verl v1 and NeMo-RL, replayed over one prepared log and compared on the same
axes (docs/semantics.md §13).

>>> import analysis
>>> from analysis.rules.policies import parse_policy, replay_policy
>>> table = analysis.records_to_table([
...     {"group_index": g, "metadata": {"parent_traj_id": "t", "dressage_end_token_version": v}}
...     for g, v in enumerate(["a", "b", "c", "a", "c"])
... ])
>>> spec = parse_policy("prime-rl:max_off_policy_steps=1,clock=versions")
>>> result = replay_policy(table, spec, batch_groups=2)
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
from analysis.rules.peer_policies import (
    Clock,
    VersionAxis,
    collect_peer,
    resolve_clock,
    version_axis,
)
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
    """One policy replayed over a log: the engine's result, named by its policy; for a
    peer rule, the clock it ran on (docs/semantics.md §13.2)."""

    policy: Policy
    result: ReplayResult
    clock: Clock | None = None
    _axis: VersionAxis | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def summary(self) -> ReplaySummary:
        return self.result.summary

    def __repr__(self) -> str:
        """``PolicyResult(prime-rl:max_off_policy_steps=1, B=4, clock=steps: 20 of 40 groups
        kept, ...)``: the policy, not the K and M a peer rule does not have."""
        groups = self.summary.counts["groups"]
        said = [
            f"{groups['kept']:,} of {groups['total']:,} groups kept",
            f"{groups['dropped_stale']:,} dropped stale",
        ]
        if isinstance(self.policy, DressagePolicy):
            said.append(f"{groups['rejected_span']:,} rejected")
        said.append(f"{groups['failed']:,} failed")
        clock = f", clock={self.clock.name}" if self.clock is not None else ""
        return (
            f"PolicyResult({self.policy.label()}, B={self.summary.config.batch_groups}{clock}: "
            f"{', '.join(said)})"
        )

    @functools.cached_property
    def decisions(self) -> pl.DataFrame:
        """The engine's decision table; for a peer rule, with the start version the rule
        measured (``start_version``, its label) and its index in observation order
        (``start_version_index``, null when it is not an observed version; §13.1)."""
        frame = self.result.decisions
        if self._axis is None:
            return frame
        index = pl.Series(self._axis.start_index, dtype=pl.Int64)
        return frame.with_columns(
            start_version=pl.Series(self._axis.start_label, dtype=pl.String),
            start_version_index=index.set(index >= _NO_VERSION_SERIES_FLOOR, None),
        )

    @property
    def batches(self) -> pl.DataFrame:
        return self.result.batches

    def to_dict(self) -> dict[str, Any]:
        """The summary's ``to_dict()`` with the policy and its knobs first (for a peer rule,
        ``policy.clock``: the clock that ran, ``own`` resolved, and ``policy.lag_unit``); a
        peer rule's setting is its knobs and the batch size (no K, M, or Dressage metric
        names)."""
        figures = self.summary.to_dict()
        said = self.policy.to_dict()
        if isinstance(self.policy, PeerPolicy):
            figures["config"] = {"batch_groups": self.summary.config.batch_groups}
            figures.pop("dressage_metrics", None)
        if self.clock is not None:
            said["clock"] = self.clock.name
            said["lag_unit"] = self.clock.unit
        return {"policy": said, **figures}


_NO_VERSION_SERIES_FLOOR = 1 << 60  # NO_VERSION and above: a group without versions


def replay_policy(
    log: pl.DataFrame | PreparedLog,
    policy: Policy,
    *,
    batch_groups: int | None = None,
    order_by: str | None = None,
    formats: tuple[str, ...] = (),
) -> PolicyResult:
    """Replay one policy over a log (prepared once; pass a PreparedLog to reuse it).

    ``formats`` are the log's formats (a load report's): a peer rule's default clock reads
    the step its own system's log records (prime-rl's ``rollouts/step_N``, §13.2)."""
    prepared = log if isinstance(log, PreparedLog) else prepare(log, order_by=order_by)
    if isinstance(policy, DressagePolicy):
        return PolicyResult(policy, replay(prepared, policy.config(batch_groups)))
    if not isinstance(policy, PeerPolicy):
        raise TypeError(f"not a policy: {policy!r}")
    config = resolve_config(prepared, ReplayConfig(batch_groups=batch_groups))
    clock = resolve_clock(policy, prepared, formats)
    observation, collection = collect_peer(prepared, policy, config.batch_groups or 1, clock)
    summary = summarise(prepared, config, observation, collection)
    summary = dataclasses.replace(summary, notes=summary.notes + _peer_notes(policy, clock))
    result = ReplayResult(
        config=config,
        summary=summary,
        _prepared=prepared,
        _observation=observation,
        _collection=collection,
    )
    return PolicyResult(policy, result, clock, _axis=version_axis(prepared))


_SYSTEMS = {"prime-rl": "prime-rl", "verl-drop": "verl", "nemo-windowed": "NeMo-RL"}


def _peer_notes(policy: PeerPolicy, clock: Clock) -> tuple[str, ...]:
    notes = [clock.note(_SYSTEMS.get(policy.name, policy.name))]
    if isinstance(policy, VerlDropPolicy):
        notes.append(
            "verl counts staleness from g0, the trainer step at which a prompt was submitted, "
            "which no log records; the group's start version stands in for it. It can be "
            "earlier or later than g0 - 1, so verl's own rule may drop a group this replay "
            "keeps and keep one it drops (docs/semantics.md §13.1)"
        )
    return tuple(notes)


POLICY_SWEEP_SCHEMA: dict[str, Any] = {"policy": pl.String, **SWEEP_SCHEMA}
"""The rows of a policy sweep; ``clock`` (the clock each peer rule ran on, null for
Dressage's) is added after ``policy``."""


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
    formats: tuple[str, ...] = (),
) -> PolicySweep:
    """Replay each policy over one prepared log; one row each, the Pareto front marked
    across them all (more tokens kept against a lower mean version gap); ``formats`` as
    for :func:`replay_policy`."""
    results = []
    for done, policy in enumerate(policies, start=1):
        results.append(replay_policy(prepared, policy, batch_groups=batch_groups, formats=formats))
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
    clocks = pl.Series(
        "clock", [None if r.clock is None else r.clock.name for r in results], dtype=pl.String
    )
    rows = rows.insert_column(1, clocks)
    return PolicySweep(rows=rows, results=tuple(results))
