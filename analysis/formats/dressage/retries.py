"""What a run's files say of its retry limit (``DRESSAGE_ROLLOUT_MAX_RETRIES``,
docs/semantics.md §12.6).

Dressage retries a failed group while its ``dressage_retry_count`` r is below the limit L
(and then counts it up), else drops it with an "exhausted retries" line. So an attempt
with retry count r exists only if L >= r; a retry line for an attempt at r says L > r; an
exhaustion line for one at r says L <= r (with the first: L = r). The log's lines name the
async group id, which the failed trajectories' ``error.json`` carry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from analysis.errors import Message, setting

DEFAULT_MAX_RETRIES = 2
"""Dressage's default for ``DRESSAGE_ROLLOUT_MAX_RETRIES``."""


@dataclass(frozen=True)
class RetryLimit:
    """Bounds on the retry limit L that the files allow (``high`` None: no upper bound),
    and what set them."""

    low: int = 0
    high: int | None = None
    evidence: tuple[str, ...] = ()

    @property
    def exact(self) -> int | None:
        """L when the files pin it, else None."""
        return self.low if self.high == self.low else None

    def candidates(self, top: int) -> list[int]:
        """The limits to try: from ``low`` to ``high`` (or ``top`` when higher is
        unbounded, a limit above every failed attempt's retry count acting as any
        larger one)."""
        high = self.high if self.high is not None else max(self.low, top)
        return list(range(self.low, max(self.low, high) + 1))

    def words(self) -> str:
        """The bounds as text: ``2``, ``>= 1`` or ``1..3``."""
        if self.exact is not None:
            return str(self.exact)
        if self.high is None:
            return f">= {self.low}"
        return f"{self.low}..{self.high}"


def infer_retry_limit(
    retry_counts: Iterable[int],
    by_async_group: Mapping[int, int],
    events: Iterable[tuple[str, int]],
) -> tuple[RetryLimit, list[str]]:
    """Bounds on the retry limit from the attempts' retry counts, and from the log's retry
    and exhaustion lines (``events``: kind and async group id) whose group is one of
    ``by_async_group`` (async group id -> the attempt's retry count); warnings when the
    files contradict each other."""
    counts = list(retry_counts)
    low, high = (max(counts) if counts else 0), None
    evidence = [f"an attempt with retry count {low}"] if low else []
    retried_at: list[int] = []
    exhausted_at: list[int] = []
    for kind, group in events:
        count = by_async_group.get(group)
        if count is None:
            continue
        if kind == "retried":
            retried_at.append(count)
        elif kind == "exhausted":
            exhausted_at.append(count)
    if retried_at and max(retried_at) + 1 > low:
        low = max(retried_at) + 1
        evidence = [f"a retry line for an attempt with retry count {low - 1}"]
    if exhausted_at:
        high = min(exhausted_at)
        evidence.append(f"an exhaustion line for an attempt with retry count {high}")
    warnings: list[str] = []
    if high is not None and high < low:
        warnings.append(
            Message(
                f"dressage_log.txt: an exhaustion line at retry count {high} contradicts "
                + " and ".join(evidence[:-1])
                + f"; the retry limit is taken as {low} (pass "
            )
            + setting("max_retries")
            + " to set it)"
        )
        high = None
    return RetryLimit(low, high, tuple(evidence)), warnings
