"""Dressage's fully-async collector (``generate_rollout_async`` in
``dressage/rollout/fully_async_rollout.py``), poll by poll (docs/semantics.md §12.4).

It shares the partial loop's worker queue, tracker and polls (:class:`Collector`); what
differs is what a call does with the completed groups it polled but did not need once its
batch is full: the partial loop puts them back on the queue for the next call, the fully
loop keeps them in a dict local to the call, so they are gone when it returns, failed ones
too, without a retry or a log line (``discarded_surplus``). Nothing drains the worker after
the final call: what it queued and no call polled is left over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from analysis.engine.decisions import Decision
from analysis.engine.run_loop.collector import Attempt, Collector

LOOPS = ("partial", "fully")
"""Dressage's two collector loops: ``partial_async_rollout.py`` and ``fully_async_rollout.py``."""

UNPOLLED = "unconsumed_after_final"
"""The leftover kind of an attempt the fully-async worker queued that no call polled."""


class FullyCollector(Collector):
    """The fully-async loop's collector: :class:`Collector` without the put-back."""

    def _unneeded(self, fetched: list[Attempt], rollout_id: int, *, final: bool) -> None:
        """Polled, not needed: gone with the call's local ``completed_by_id`` dict (failed
        groups too, without a retry); ``final`` changes nothing, the fully-async loop has
        no final drain."""
        del final
        for attempt in fetched:
            self._decide(attempt, Decision.DISCARDED_SURPLUS, rollout_id)

    def finish(self, final_rollout_id: int | None) -> None:
        """What the worker queued (or completed at exit) and no call polled."""
        for attempt in self.order:
            if attempt.attempt_id not in self.decisions:
                self._decide(attempt, Decision.LEFTOVER, final_rollout_id, leftover=UNPOLLED)


@dataclass(frozen=True)
class ThrownAway:
    """Generation the fully-async loop threw away: the attempts a call polled and did not
    need (``discarded_surplus``), their trajectories and those trajectories' response
    tokens, in all and per rollout call (only the calls that threw any away)."""

    groups: int
    trajectories: int
    response_tokens: int
    per_call: tuple[tuple[int, int, int, int], ...] = ()
    """(rollout id, groups, trajectories, response tokens), by rollout id."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": self.groups,
            "trajectories": self.trajectories,
            "response_tokens": self.response_tokens,
            "per_call": [
                {"rollout_id": r, "groups": g, "trajectories": t, "response_tokens": n}
                for r, g, t, n in self.per_call
            ],
        }


def thrown_away(trajectories: pl.DataFrame) -> ThrownAway:
    """:class:`ThrownAway` from a replay's trajectory frame (``group_id``, ``decision``,
    ``decided_in``, ``response_tokens``); tokens a record does not carry count as 0."""
    surplus = trajectories.filter(pl.col("decision") == Decision.DISCARDED_SURPLUS)
    per_call = (
        surplus.group_by("decided_in")
        .agg(
            pl.col("group_id").n_unique().alias("groups"),
            pl.len().alias("trajectories"),
            pl.col("response_tokens").fill_null(0).sum().alias("tokens"),
        )
        .sort("decided_in")
    )
    return ThrownAway(
        groups=surplus["group_id"].n_unique(),
        trajectories=surplus.height,
        response_tokens=int(surplus["response_tokens"].fill_null(0).sum()),
        per_call=tuple(
            (int(r), int(g), int(t), int(n))
            for r, g, t, n in per_call.select(
                "decided_in", "groups", "trajectories", "tokens"
            ).iter_rows()
        ),
    )
