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
from typing import Any

import polars as pl

from analysis.engine.decisions import Decision
from analysis.engine.run_loop.inference import TieSearch
from analysis.engine.run_loop.replay import LoopReplay, replay_run
from analysis.formats.dressage.retries import DEFAULT_MAX_RETRIES
from analysis.formats.dressage.run import RunLog, read_run
from analysis.table.limits import Limits

LOOPS: tuple[str, ...] = ("partial",)
"""Dressage's collector loops the search tries. After the fully-async loop is merged,
``"fully"`` joins here and :func:`_replay` passes ``loop=`` to ``replay_run``."""


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
    loop: str,
    keep_versions: int,
    max_retries: int | None,
    ties: TieSearch | None = None,
) -> LoopReplay:
    """One replay at one setting; the single place the loop dimension is passed on."""
    del loop  # one loop today (LOOPS); the fully-async loop adds loop=loop here
    return replay_run(run, keep_versions=keep_versions, max_retries=max_retries, ties=ties)


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
) -> Verification:
    """Check, step by step, how well the replay reproduces a run folder's own files: at
    the settings given, else at those (K, retry limit, loop) that agree with the most
    checks."""
    run = read_run(Path(folder), limits=limits if limits is not None else Limits())
    labels = run.trajectories["end_version"].drop_nulls().n_unique()
    ks = [keep_versions] if keep_versions is not None else list(range(labels + 2))
    # the retry limit: as given, else each replay takes the one the files allow that
    # agrees best (replay_run)
    retries: list[int | None] = [max_retries]
    results: list[tuple[int, str, int, int, LoopReplay]] = []
    for loop in LOOPS:
        for k in ks:
            for limit in retries:
                replayed = _replay(run, loop, k, limit, SCAN_TIES)
                near = abs(replayed.max_retries - DEFAULT_MAX_RETRIES)
                results.append((_score(replayed), loop, k, near, replayed))
    results.sort(key=lambda r: (-r[0], LOOPS.index(r[1]), r[2], r[3]))
    for i, (_, loop, k, near, replayed) in enumerate(results[:RESCORED]):
        replayed = _replay(run, loop, k, max_retries)
        results[i] = (_score(replayed), loop, k, near, replayed)
    best = max(score for score, *_ in results)
    winners = [r for r in results if r[0] == best]
    winners.sort(key=lambda r: (LOOPS.index(r[1]), r[2], r[3]))
    _, loop, _, _, chosen = winners[0]
    found = tuple(sorted({r[2] for r in winners if r[1] == loop}))
    return Verification(
        chosen,
        found if keep_versions is None else (),
        given=keep_versions is not None,
        loop=loop,
        max_preempts=run.max_preempts,
        tried=len(results),
        unexplained=_reasons(run, chosen),
    )
