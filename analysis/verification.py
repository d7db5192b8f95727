"""``verify``: a Dressage run folder replayed as its own loop, at the K it was made with, and
checked step by step against what its files say (docs/semantics.md §12)."""

from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, Literal

import polars as pl

from analysis.engine.run_loop.fully import ThrownAway as ThrownAway
from analysis.engine.run_loop.replay import LoopReplay, keep_versions_reproducing, replay_run
from analysis.formats.dressage.run import read_run
from analysis.table.limits import Limits


@dataclass(frozen=True)
class Verification:
    """A run folder replayed as Dressage's loop at the K it was made with: as given, else
    the first that reproduces it (0 when none does); its checks say where it agrees."""

    result: LoopReplay
    found: tuple[int, ...]
    """Every K that reproduces the run (when none was given)."""
    given: bool

    @property
    def consistent(self) -> bool:
        return bool(self.result.consistent)

    def to_dict(self) -> dict[str, Any]:
        """The checks and the total, as ``verify --json`` prints them."""
        return {
            "loop": self.result.loop,
            "loop_reason": self.result.loop_reason,
            "keep_versions": self.result.keep_versions,
            "keep_versions_given": self.given,
            "keep_versions_reproducing": list(self.found) if not self.given else None,
            "agree": int(self.result.checks["agrees"].sum()),
            "total": self.result.checks.height,
            "checks": self.result.checks.to_dicts(),
        }


def verify_run(
    folder: str | PathLike[str],
    *,
    keep_versions: int | None = None,
    limits: Limits | None = None,
    loop: Literal["partial", "fully"] | None = None,
) -> Verification:
    """Check, step by step, that the replay reproduces what a run folder's own files say;
    without ``keep_versions``, at the first K that reproduces it; ``loop`` as in
    :func:`replay_run` (None: the run's own, as its files tell)."""
    run = read_run(Path(folder), limits=limits if limits is not None else Limits())
    found = keep_versions_reproducing(run, loop=loop) if keep_versions is None else []
    chosen = keep_versions if keep_versions is not None else (found or [0])[0]
    return Verification(
        replay_run(run, keep_versions=chosen, loop=loop),
        tuple(found),
        given=keep_versions is not None,
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
