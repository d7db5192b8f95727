"""``verify``: a Dressage run folder replayed as its own loop, at the K it was made with, and
checked step by step against what its files say (docs/semantics.md §12)."""

from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, Literal

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
