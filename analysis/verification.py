"""``verify``: a Dressage run folder replayed as its own loop at the settings that best
reproduce it, and checked step by step against what its files say (docs/semantics.md §12).

Without settings given, every K from 0 (off) to the run's distinct versions + 1 is
replayed, each with every retry limit the files allow (:func:`replay_run`); the settings
whose replay agrees with the most checks win (the smallest K, then the limit nearest
Dressage's default, among equals).
"""

from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, Literal

import polars as pl

from analysis.engine.decisions import Decision
from analysis.engine.run_loop.fully import ThrownAway as ThrownAway
from analysis.engine.run_loop.replay import LoopReplay, replay_run
from analysis.engine.run_loop.ties import TieSearch
from analysis.formats.dressage.retries import DEFAULT_MAX_RETRIES
from analysis.formats.dressage.run import RunLog, read_run
from analysis.table.limits import Limits

LOOPS: tuple[str, ...] = ("partial", "fully")
"""Dressage's collector loops the search tries when neither the caller nor the run's files
tell the loop."""


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
            "loop": self.loop,
            "loop_reason": self.result.loop_reason,
            "keep_versions": self.result.keep_versions,
            "keep_versions_given": self.given,
            "keep_versions_reproducing": list(self.found) if not self.given else None,
            "max_preempts": list(self.max_preempts) or None,
            "max_retries": self.result.max_retries,
            "max_retries_allowed": self.result.max_retries_words,
            "max_retries_from": self.result.max_retries_how,
            "settings_tried": self.tried,
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
    checks."""
    run = read_run(Path(folder), limits=limits if limits is not None else Limits())
    # the loop: as given, else the one the files tell (None: replay_run takes it), else both
    loops: tuple[str | None, ...] = (loop,) if loop else (None,) if run.loop else LOOPS
    labels = run.trajectories["end_version"].drop_nulls().n_unique()
    ks = [keep_versions] if keep_versions is not None else list(range(labels + 2))
    # the retry limit: as given, else each replay takes the one the files allow that
    # agrees best (replay_run)
    retries: list[int | None] = [max_retries]
    results: list[tuple[int, str | None, int, int, LoopReplay]] = []
    for each in loops:
        for k in ks:
            for limit in retries:
                replayed = _replay(run, each, k, limit, SCAN_TIES)
                near = abs(replayed.max_retries - DEFAULT_MAX_RETRIES)
                results.append((_score(replayed), each, k, near, replayed))
    results.sort(key=lambda r: (-r[0], loops.index(r[1]), r[2], r[3]))
    for i, (_, each, k, near, replayed) in enumerate(results[:RESCORED]):
        replayed = _replay(run, each, k, max_retries)
        results[i] = (_score(replayed), each, k, near, replayed)
    best = max(score for score, *_ in results)
    winners = [r for r in results if r[0] == best]
    winners.sort(key=lambda r: (loops.index(r[1]), r[2], r[3]))
    _, best_loop, _, _, chosen = winners[0]
    found = tuple(sorted({r[2] for r in winners if r[1] == best_loop}))
    return Verification(
        chosen,
        found if keep_versions is None else (),
        given=keep_versions is not None,
        loop=chosen.loop,
        max_preempts=run.max_preempts,
        tried=len(results),
        unexplained=_reasons(run, chosen),
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
    folder: str | PathLike[str],
    *,
    limits: Limits | None = None,
    loop: Literal["partial", "fully"] | None = None,
) -> RunThrownAway | None:
    """What a run folder's fully-async loop threw away (docs/semantics.md §12.4), replayed
    at the K its staleness metrics tell (:func:`keep_versions_told`), without them at the K
    :func:`verify_run` finds; None for the partial loop (it throws nothing away)
    and when nothing in the files tells the fully loop and ``loop`` does not either."""
    run = read_run(Path(folder), limits=limits if limits is not None else Limits())
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
        verified = verify_run(folder, limits=limits, loop=loop)
        result = verified.result
        how = "found as verify finds it" if verified.found else "no K reproduces the run; at 0"
    return RunThrownAway(
        result.thrown_away(),
        f"keep_versions={result.keep_versions} ({how}), {result.loop} loop ({result.loop_reason})",
    )


def keep_versions_told(metrics: pl.DataFrame) -> int | None:
    """The K Dressage's staleness metrics imply, or None without them: the tracker writes
    ``staleness/*`` index metrics only when on (none: K = 0); its cutoff index is
    ``max(0, versions - K)``, so a step with a cutoff above 0 gives K = current + 1 -
    cutoff; a cutoff that stayed 0 acts as any K above the versions seen (the largest
    current index + 1)."""
    current, cutoff = "staleness/current_version_index", "staleness/cutoff_version_index"
    if metrics.height == 0 or "rollout_id" not in metrics.columns:
        return None
    if current not in metrics.columns:
        return 0
    rows = metrics.select(current, *([cutoff] if cutoff in metrics.columns else []))
    most = None
    for row in rows.iter_rows():
        if row[0] is None:
            continue
        if len(row) > 1 and row[1] is not None and row[1] > 0:
            return int(row[0]) + 1 - int(row[1])
        most = int(row[0]) if most is None else max(most, int(row[0]))
    return None if most is None else most + 1
