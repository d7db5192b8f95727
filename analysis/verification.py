"""``verify``: a Dressage run folder replayed as its own loop at the settings that best
reproduce it, and checked step by step against what its files say (docs/semantics.md §12).

Without settings given, the K the run's staleness metrics tell is replayed first (with the
full search of near-simultaneous completions' orders), then every other K from 0 (off) to
the run's distinct versions (that one standing for every larger K, which replays alike)
that could agree as well: a K whose cutoff index contradicts the metrics at more steps
than the best replay so far disagrees is not replayed. Each replay takes every retry limit
the files allow (:func:`replay_run`); the settings whose replay agrees with the most checks
win (the metrics' K, then the smallest K, then the limit nearest Dressage's default, among
equals).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, Literal

import polars as pl

from analysis.engine.decisions import Decision
from analysis.engine.run_loop.checks import keep_versions_told as keep_versions_told
from analysis.engine.run_loop.fully import ThrownAway as ThrownAway
from analysis.engine.run_loop.records import step_metrics
from analysis.engine.run_loop.replay import LoopReplay, replay_run
from analysis.engine.run_loop.ties import TieSearch
from analysis.formats.dressage.retries import DEFAULT_MAX_RETRIES
from analysis.formats.dressage.run import RunLog, read_run
from analysis.table.limits import Limits

LOOPS: tuple[str, ...] = ("partial", "fully")
"""Dressage's collector loops the search tries when neither the caller nor the run's files
tell the loop."""


@dataclass(frozen=True)
class ToldK:
    """The K a run's staleness metrics tell (:func:`staleness_told`)."""

    value: int
    exact: bool
    """False: the cutoff index stayed 0, so every K from ``value`` up reads alike."""
    words: str


@dataclass(frozen=True)
class Verification:
    """A run folder replayed as Dressage's loop at the settings given, else at those that
    best reproduce it; its checks say where it agrees."""

    result: LoopReplay
    found: tuple[int, ...]
    """Every K that agrees as well as the one shown (when K was not given)."""
    given: bool
    loop: str = "partial"
    max_preempts: tuple[int, ...] = ()
    """M as the run's span rejections name it; empty: off, or no rejection shows it."""
    tried: int = 1
    """How many settings were replayed to find these."""
    unexplained: tuple[str, ...] = ()
    """Why the checks that still disagree may do so (missing files, unknown rows)."""
    told: ToldK | None = None
    """How the run's staleness metrics tell the K shown; None: they do not (or tell
    another, see ``warnings``)."""
    keep_versions_told: int | None = None
    """The K the run's staleness metrics tell, whether or not it is the one shown."""
    pruned: int = 0
    """Settings not replayed: their K contradicts the metrics more than the best replay
    disagrees (:func:`must_disagree`)."""
    warnings: tuple[str, ...] = ()
    """A K told by the metrics that another K agrees better than."""
    stands_for_more: bool = False
    """The K shown is the number of versions observed (or more): every larger K replays alike."""

    @property
    def keep_versions_from(self) -> str:
        """How the K shown was found: given, told by the metrics, or the scan's best."""
        if self.given:
            return "given"
        if self.told is not None:
            return "as the run's staleness metrics tell (" + self.told.words + ")"
        return "the K whose replay agrees with the most checks"

    @property
    def consistent(self) -> bool:
        return bool(self.result.consistent)

    @property
    def agree(self) -> int:
        return int(self.result.checks["agrees"].sum()) if self.result.checks.height else 0

    @property
    def max_preempts_words(self) -> str:
        """M as said: the value the rejections name, or ``off/unknown``."""
        return ", ".join(map(str, self.max_preempts)) or "off/unknown"

    def disagreeing(self) -> pl.DataFrame:
        """The checks that disagree at these settings."""
        return self.result.checks.filter(~pl.col("agrees"))

    def to_dict(self) -> dict[str, Any]:
        """The settings found, the checks and the total, as ``verify --json`` prints them."""
        return {
            "engine": "dressage-loop",
            "loop": self.loop,
            "loop_reason": self.result.loop_reason,
            "keep_versions": self.result.keep_versions,
            "keep_versions_given": self.given,
            "keep_versions_reproducing": list(self.found) if not self.given else None,
            "keep_versions_from": self.keep_versions_from,
            "keep_versions_told": self.keep_versions_told,
            "keep_versions_or_more": self.stands_for_more,
            "max_preempts": list(self.max_preempts) or None,
            "max_retries": self.result.max_retries,
            "max_retries_allowed": self.result.max_retries_words,
            "max_retries_from": self.result.max_retries_how,
            "settings_tried": self.tried,
            "settings_ruled_out_by_metrics": self.pruned,
            "warnings": list(self.warnings),
            "agree": self.agree,
            "total": self.result.checks.height,
            "consistent": self.consistent,
            "unknown_trajectories": self.result.trajectories.filter(
                pl.col("decision") == Decision.UNKNOWN
            ).height,
            "why_disagreements_may_remain": list(self.unexplained),
            "checks": self.result.checks.to_dicts(),
        }


SCAN_TIES = TieSearch(swaps=1, candidates=20, hypotheses=2)
"""The narrow search of near-simultaneous completions' orders the scan of settings uses;
the best settings are replayed again with the full one (:class:`TieSearch`)."""
RESCORED = 4
"""How many of the scan's best settings are replayed with the full search."""


def staleness_told(metrics: pl.DataFrame) -> ToldK | None:
    """The K Dressage's staleness metrics tell, with how (:func:`keep_versions_told`)."""
    value = keep_versions_told(metrics)
    if value is None:
        return None
    current, cutoff = "staleness/current_version_index", "staleness/cutoff_version_index"
    if current not in metrics.columns:
        return ToldK(0, True, "the metrics have no staleness/* index: staleness off")
    if cutoff not in metrics.columns or metrics[cutoff].null_count() == metrics.height:
        return None  # Dressage writes both indices or neither: a subset of the metrics
    rows = metrics.select("rollout_id", current, cutoff).drop_nulls()
    for step, now, cut in rows.iter_rows():
        if cut > 0:
            return ToldK(
                value,
                True,
                f"step {step}: current_version_index {now:g}, cutoff_version_index {cut:g}",
            )
    return ToldK(value, False, f"their cutoff_version_index stayed 0: K >= {value}")


def must_disagree(metrics: Mapping[int, Mapping[str, Any]], keep_versions: int) -> int:
    """How many checks disagree at ``keep_versions`` whatever else the replay does: a step
    whose metrics give the current and cutoff version indices agrees with both only if
    ``max(0, current + 1 - K)`` is its cutoff (K = 0 writes no index at all)."""
    current, cutoff = "staleness/current_version_index", "staleness/cutoff_version_index"
    count = 0
    for row in metrics.values():
        now, cut = row.get(current), row.get(cutoff)
        if now is None:
            continue
        # K = 0: the replay has no current index; else the cutoff must be the metrics'
        wrong = cut is not None and max(0, int(now) + 1 - keep_versions) != int(cut)
        count += keep_versions == 0 or wrong
    return count


def _replay(
    run: RunLog,
    loop: str | None,
    keep_versions: int,
    max_retries: int | None,
    ties: TieSearch | None = None,
) -> LoopReplay:
    """One replay at one setting (``loop`` None: the one the run's files tell)."""
    return replay_run(
        run,
        keep_versions=keep_versions,
        max_retries=max_retries,
        loop=None if loop is None else "fully" if loop == "fully" else "partial",
        ties=ties,
    )


def _score(result: LoopReplay) -> int:
    return int(result.checks["agrees"].sum()) if result.checks.height else 0


def _reasons(run: RunLog, result: LoopReplay) -> tuple[str, ...]:
    """Why checks may still disagree at the best settings."""
    if result.consistent:
        return ()
    reasons = []
    if "traj_err" not in run.sources:
        reasons.append(
            "no traj_err/: failed trajectories, span rejections and the time failed groups "
            "completed are not known"
        )
    if "dressage_log.txt" not in run.sources:
        reasons.append("no dressage_log.txt: rollout call starts are inferred")
    if any("malformed" in w for w in run.warnings):
        reasons.append("dressage_log.txt has malformed lines (see the warnings)")
    reasons.append(
        "groups that completed within one worker tick (10 ms) may be ordered otherwise than "
        "Dressage's queue took them"
    )
    return tuple(reasons)


@dataclass
class _Tried:
    score: int
    loop: str | None
    keep_versions: int
    full: bool
    result: LoopReplay

    @property
    def near(self) -> int:
        return abs(self.result.max_retries - DEFAULT_MAX_RETRIES)


def verify_run(
    folder: str | PathLike[str],
    *,
    keep_versions: int | None = None,
    max_retries: int | None = None,
    limits: Limits | None = None,
    loop: Literal["partial", "fully"] | None = None,
) -> Verification:
    """Check, step by step, how well the replay reproduces a run folder's own files: at
    the settings given, else at those (K, retry limit, loop) that agree with the most
    checks. The K the run's staleness metrics tell is replayed first, with the full search;
    another K is replayed only when it could agree as well (:func:`must_disagree`)."""
    run = read_run(Path(folder), limits=limits if limits is not None else Limits())
    # the loop: as given, else the one the files tell (None: replay_run takes it), else both
    loops: tuple[str | None, ...] = (loop,) if loop else (None,) if run.loop else LOOPS
    labels = run.trajectories["end_version"].drop_nulls().n_unique()
    told = staleness_told(run.metrics) if keep_versions is None else None
    metrics = step_metrics(run)
    if keep_versions is not None:
        ks = [keep_versions]
    else:
        # every K >= the versions observed replays alike (no cutoff above 0): one stands
        # for them all (the metrics' K when it is one of them)
        top = told.value if told is not None and told.value >= labels else labels
        ks = sorted({*range(labels), top}, key=lambda k: (must_disagree(metrics, k), k))
        if told is not None:
            ks = [told.value, *(k for k in ks if k != told.value)]
    # the retry limit: as given, else each replay takes the one the files allow that
    # agrees best (replay_run)
    tried: list[_Tried] = []
    pruned = 0
    for each in loops:
        for k in ks:
            best = max((t.score for t in tried), default=-1)
            total = max((t.result.checks.height for t in tried), default=0)
            if tried and total - must_disagree(metrics, k) < best:
                pruned += 1  # cannot agree as well as one already replayed
                continue
            full = keep_versions is not None or (told is not None and k == told.value)
            replayed = _replay(run, each, k, max_retries, None if full else SCAN_TIES)
            tried.append(_Tried(_score(replayed), each, k, full, replayed))
    scanned = sorted(
        (t for t in tried if not t.full),
        key=lambda t: (-t.score, loops.index(t.loop), t.keep_versions, t.near),
    )
    for t in scanned[:RESCORED]:
        t.result = _replay(run, t.loop, t.keep_versions, max_retries)
        t.score, t.full = _score(t.result), True
    best = max(t.score for t in tried)
    preferred = told.value if told is not None else None
    winners = sorted(
        (t for t in tried if t.score == best),
        key=lambda t: (t.keep_versions != preferred, loops.index(t.loop), t.keep_versions, t.near),
    )
    chosen = winners[0]
    found = tuple(sorted({t.keep_versions for t in winners if t.loop == chosen.loop}))
    agrees_with_told = told is not None and (
        chosen.keep_versions == told.value or (not told.exact and chosen.keep_versions > told.value)
    )
    warnings: list[str] = []
    if told is not None and not agrees_with_told:
        at_told = [t for t in tried if t.keep_versions == told.value and t.loop == chosen.loop]
        said = f"{at_told[0].score:,}" if at_told else "fewer"
        warnings.append(
            f"the run's staleness metrics tell keep_versions={told.value} ({told.words}), "
            f"but keep_versions={chosen.keep_versions} agrees with more of the run's checks "
            f"({best:,} of {chosen.result.checks.height:,}, against {said} at "
            f"keep_versions={told.value}): the metrics may belong to another run or have been "
            f"edited; -k {told.value} replays at the metrics' K"
        )
    return Verification(
        chosen.result,
        found if keep_versions is None else (),
        given=keep_versions is not None,
        loop=chosen.result.loop,
        max_preempts=run.max_preempts,
        tried=len(tried),
        unexplained=_reasons(run, chosen.result),
        told=told if agrees_with_told else None,
        keep_versions_told=None if told is None else told.value,
        pruned=pruned,
        warnings=tuple(warnings),
        stands_for_more=keep_versions is None and chosen.keep_versions >= labels,
    )


@dataclass(frozen=True)
class RunThrownAway:
    """The generation a fully-async run threw away (:class:`ThrownAway`), as the replay of
    its own loop at the K ``verify`` finds counts it, with that setting in words."""

    thrown: ThrownAway
    setting: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.thrown.to_dict(), "setting": self.setting}


def run_thrown_away(
    folder: str | PathLike[str] | RunLog,
    *,
    limits: Limits | None = None,
    loop: Literal["partial", "fully"] | None = None,
) -> RunThrownAway | None:
    """What a run folder's fully-async loop threw away (docs/semantics.md §12.4), replayed
    at the K its staleness metrics tell (:func:`keep_versions_told`), without them at the K
    :func:`verify_run` finds; None for the partial loop (it throws nothing away)
    and when nothing in the files tells the fully loop and ``loop`` does not either.
    ``folder`` may be the run already read (:func:`read_run`): it is not read again."""
    run = (
        folder
        if isinstance(folder, RunLog)
        else read_run(Path(folder), limits=limits if limits is not None else Limits())
    )
    if (loop or run.loop) != "fully":
        return None
    told = keep_versions_told(run.metrics)
    result = None if told is None else replay_run(run, keep_versions=told, loop=loop)
    if result is not None:  # Dressage's own figures: no search (it would take minutes)
        wrong = result.checks.height - int(result.checks["agrees"].sum())
        how = "as the run's metrics tell" + (
            f"; the replay disagrees with {wrong:,} of the run's {result.checks.height:,} checks"
            if wrong
            else ""
        )
    else:  # no metrics: verify's search
        verified = verify_run(run.root, limits=limits, loop=loop)
        result = verified.result
        how = "found as verify finds it" if verified.found else "no K reproduces the run; at 0"
    return RunThrownAway(
        result.thrown_away(),
        f"keep_versions={result.keep_versions} ({how}), {result.loop} loop ({result.loop_reason})",
    )
