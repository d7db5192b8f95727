"""The two clocks of the run-loop simulation (:mod:`analysis.simulation.run_loop_sim`): real
time, and generation time, which stands still while the weights are updated."""

from __future__ import annotations

import bisect


class SimClock:
    """Real time and generation time (which stops during weight updates)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float]] = []  # (real start, real end), in order
        self.frozen_at: list[float] = []  # generation time of each pause

    def gen(self, t: float) -> float:
        paused = 0.0
        for start, end in self.pauses:
            if t <= start:
                break
            paused += min(t, end) - start
        return t - paused

    def real(self, g: float) -> float:
        t = g
        for (start, end), frozen in zip(self.pauses, self.frozen_at, strict=True):
            if g > frozen:
                t += end - start
            else:
                break
        return t

    def version(self, g: float) -> int:
        """The version generating just before generation time ``g`` (labels 1, 2, ...)."""
        return 1 + bisect.bisect_left(self.frozen_at, g)

    def pause(self, start: float, length: float) -> None:
        self.frozen_at.append(self.gen(start))
        self.pauses.append((start, start + length))


__all__ = ["SimClock"]
