"""One setting of Dressage's two staleness controls and the trainer batch size, validated
once (docs/semantics.md §3-§5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analysis.errors import ConfigError, setting

MAX_SETTING = 1_000_000
"""Largest K, M or B accepted: more versions or groups than any run has."""


def k_label(keep_versions: int) -> str:
    """How a keep_versions value reads in legends and ticks: K=0 is the control off."""
    return "off" if keep_versions == 0 else str(keep_versions)


def m_label(max_preempts: int | None) -> str:
    """How a max_preempts value reads in legends and ticks."""
    return "none" if max_preempts is None else str(max_preempts)


@dataclass(frozen=True)
class ReplayConfig:
    """One setting of the two controls and the trainer batch size, validated on construction.

    Examples
    --------
    >>> ReplayConfig(keep_versions=2, max_preempts=None, batch_groups=8).keep_versions
    2
    >>> ReplayConfig(keep_versions=-1)
    Traceback (most recent call last):
    ...
    analysis.errors.ConfigError: require `keep_versions` >= 0 (found -1); pass keep_versions=0 to disable the batch-level control
    """

    keep_versions: int = 0
    max_preempts: int | None = None
    batch_groups: int | None = None

    def __post_init__(self) -> None:
        self._check_types_and_signs()
        for name in ("keep_versions", "max_preempts", "batch_groups"):
            value = getattr(self, name)
            if value is not None and value > MAX_SETTING:
                raise ConfigError(
                    f"require `{name}` <= {MAX_SETTING:,} (found {value:,}); "
                    "pass " + setting(name) + " with a value a run can have"
                )

    def _check_types_and_signs(self) -> None:
        if isinstance(self.keep_versions, bool) or not isinstance(self.keep_versions, int):
            raise ConfigError(
                f"require `keep_versions` to be an integer (found {self.keep_versions!r})"
            )
        if self.keep_versions < 0:
            raise ConfigError(
                f"require `keep_versions` >= 0 (found {self.keep_versions}); "
                "pass " + setting("keep_versions", 0) + " to disable the batch-level control"
            )
        if self.max_preempts is not None and (
            isinstance(self.max_preempts, bool)
            or not isinstance(self.max_preempts, int)
            or self.max_preempts < 0
        ):
            raise ConfigError(
                f"require `max_preempts` >= 0 (found {self.max_preempts!r}); "
                "pass "
                + setting("max_preempts", "none")
                + " to disable the partial-rollout control"
            )
        if self.batch_groups is not None and (
            isinstance(self.batch_groups, bool)
            or not isinstance(self.batch_groups, int)
            or self.batch_groups < 1
        ):
            raise ConfigError(
                f"require `batch_groups` >= 1 (found {self.batch_groups!r}); "
                "pass "
                + setting("batch_groups")
                + " with the number of GRPO groups per trainer step"
            )

    def describe(self) -> str:
        """``K=2, M=none, B=8``, for titles and legends."""
        limit = "none" if self.max_preempts is None else self.max_preempts
        return f"K={self.keep_versions}, M={limit}, B={self.batch_groups}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "keep_versions": self.keep_versions,
            "max_preempts": self.max_preempts,
            "batch_groups": self.batch_groups,
        }
