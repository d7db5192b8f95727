"""Compare many settings over one preparation of a log: one row per (K, M)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, overload

import polars as pl

from analysis.engine.config import MAX_SETTING, ReplayConfig
from analysis.engine.decisions import Decision, Outcome
from analysis.engine.prepare import PreparedLog
from analysis.engine.results import ReplayResult, replay, resolve_config
from analysis.errors import ConfigError, SettingSyntaxError, setting

SWEEP_SCHEMA: dict[str, Any] = {
    "keep_versions": pl.Int64,
    "max_preempts": pl.Int64,
    "batch_groups": pl.Int64,
    "groups_kept_pct": pl.Float64,
    "samples_kept_pct": pl.Float64,
    "tokens_kept_pct": pl.Float64,
    "dropped_stale_pct": pl.Float64,
    "dropped_arrival_pct": pl.Float64,
    "dropped_pending_pct": pl.Float64,
    "rejected_span_pct": pl.Float64,
    "failed_pct": pl.Float64,
    "batches_emitted": pl.Int64,
    "version_gap_mean": pl.Float64,
    "version_gap_max": pl.Int64,
    "version_span_mean": pl.Float64,
    "version_span_max": pl.Int64,
    "pareto": pl.Boolean,
    # docs/semantics.md §10.6: the same means with each trajectory weighted by its tokens
    "version_gap_mean_tokens": pl.Float64,
    "version_span_mean_tokens": pl.Float64,
    # which replay gave the row: the simple loop here, Dressage's own loop for a run folder
    "engine": pl.String,
}

SIMPLE_LOOP_ENGINE = "simple-loop"
"""The ``engine`` of a row or a replay on the simple loop (docs/semantics.md §3)."""

MAX_VALUES = 1_000
"""Most values one list may expand to (a sweep is every combination of two lists)."""

PARETO_NOTE = (
    "* Pareto-efficient: no other setting keeps more response tokens (samples when tokens "
    "are unknown) with a lower or equal mean version gap."
)


class SettingReplays(Sequence[ReplayResult]):
    """The full replay of each setting of a sweep, replayed again when asked for.

    A sweep keeps one row per setting, not the full results: over a log of a version per
    group each holds per-group and per-batch arrays (tens of MB for 300,000 groups), times
    every setting. Replaying is deterministic, so ``results[i]`` is the replay that gave
    row ``i``; each access replays it anew, so keep the ones you use.
    """

    def __init__(self, prepared: PreparedLog, configs: Sequence[ReplayConfig]) -> None:
        self._prepared = prepared
        self.configs: tuple[ReplayConfig, ...] = tuple(configs)

    def __len__(self) -> int:
        return len(self.configs)

    @overload
    def __getitem__(self, index: int) -> ReplayResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[ReplayResult]: ...
    def __getitem__(self, index: int | slice) -> ReplayResult | list[ReplayResult]:
        if isinstance(index, slice):
            return [replay(self._prepared, config) for config in self.configs[index]]
        return replay(self._prepared, self.configs[index])

    def where(self, *, max_preempts: int | None) -> SettingReplays:
        """The settings with this ``max_preempts``, in order (still replayed when asked)."""
        return SettingReplays(
            self._prepared, [c for c in self.configs if c.max_preempts == max_preempts]
        )

    def __repr__(self) -> str:
        return f"SettingReplays({len(self):,} settings, each replayed when asked for)"


class Configured(Protocol):
    """A replayed setting that says its setting (a run folder's, on Dressage's loop)."""

    @property
    def config(self) -> ReplayConfig: ...


Kept = TypeVar("Kept", bound=Configured)


class KeptReplays(Sequence[Kept], Generic[Kept]):
    """The replay of each setting of a sweep, kept (a run folder's: one row per attempt and
    trajectory, small; each M at one K is the same replay)."""

    def __init__(self, settings: Sequence[Kept]) -> None:
        self._settings = tuple(settings)
        self.configs = tuple(s.config for s in self._settings)

    def __len__(self) -> int:
        return len(self._settings)

    @overload
    def __getitem__(self, index: int) -> Kept: ...
    @overload
    def __getitem__(self, index: slice) -> list[Kept]: ...
    def __getitem__(self, index: int | slice) -> Kept | list[Kept]:
        if isinstance(index, slice):
            return list(self._settings[index])
        return self._settings[index]

    def where(self, *, max_preempts: int | None) -> KeptReplays[Kept]:
        """The settings of this ``max_preempts`` (each K once)."""
        return KeptReplays([s for s in self._settings if s.config.max_preempts == max_preempts])

    def __repr__(self) -> str:
        return f"KeptReplays({len(self):,} settings, kept)"


@dataclass(frozen=True)
class SweepResult:
    """One row per setting (``rows``); ``results[i]`` replays the setting of row ``i``
    in full when asked for (:class:`SettingReplays`: the full results are not kept), or
    for a run folder on Dressage's loop is its replay, kept (:class:`KeptReplays` of
    ``LoopSetting``)."""

    rows: pl.DataFrame
    results: SettingReplays | KeptReplays[Any]
    notes: tuple[str, ...] = ()
    """The notes about the log of every setting's replay, each once, in order (a version
    observed after a newer one, unknown tokens, no versions at all)."""
    engine: str = SIMPLE_LOOP_ENGINE
    """Which replay gave the rows: ``simple-loop`` or ``dressage-loop`` (a run folder)."""

    def __repr__(self) -> str:
        keep = sorted(set(self.rows["keep_versions"].to_list()))
        limits = sorted({m for m in self.rows["max_preempts"].to_list() if m is not None})
        off = ["none"] if self.rows["max_preempts"].null_count() else []
        return (
            f"SweepResult({self.rows.height:,} settings on the {self.engine}: K {keep}, "
            f"M {off + limits}; .rows has one row per setting)"
        )

    def _repr_html_(self) -> str:
        """A notebook shows the table of settings."""
        return str(self.rows._repr_html_())


def parse_keep_versions(text: str) -> list[int]:
    """Parse ``0,1,2`` or ``0..6`` (inclusive) or a mix: ``0..2,4``.

    Examples
    --------
    >>> parse_keep_versions("0..3,6")
    [0, 1, 2, 3, 6]
    """
    return [v for v in _parse_values(text, "keep_versions", allow_none=False) if v is not None]


def parse_max_preempts(text: str) -> list[int | None]:
    """Parse ``none,0,1,2`` or ``none,0..3``.

    Examples
    --------
    >>> parse_max_preempts("none,0..2")
    [None, 0, 1, 2]
    """
    return _parse_values(text, "max_preempts", allow_none=True)


OFF_WORDS = ("off", "none")
"""Words that turn a control off, for K (= 0) and M (= none) alike."""


def parse_one_keep_versions(text: str | int) -> int:
    """One K: a whole number, or ``off``/``none`` (= 0, the control off).

    Examples
    --------
    >>> parse_one_keep_versions("2"), parse_one_keep_versions("off")
    (2, 0)
    """
    if isinstance(text, int):
        return text
    if text.strip().lower() in OFF_WORDS:
        return 0
    try:
        return parse_whole(text)
    except ValueError:
        listed = "," in text or ".." in text
        raise SettingSyntaxError(
            setting("keep_versions")
            + f": expected a whole number or off (found {text!r})"
            + ("; lists of K values are for sweep, plot and report" if listed else "")
        ) from None


def parse_one_max_preempts(text: str | int | None) -> int | None:
    """One M: a whole number, or ``none``/``off`` (the control off).

    Examples
    --------
    >>> parse_one_max_preempts("1"), parse_one_max_preempts("off")
    (1, None)
    """
    if text is None or isinstance(text, int):
        return text
    if text.strip().lower() in OFF_WORDS:
        return None
    try:
        return parse_whole(text)
    except ValueError:
        raise SettingSyntaxError(
            setting("max_preempts") + f": expected a whole number or none (found {text!r})"
        ) from None


def parse_whole(text: str) -> int:
    """An integer written in ASCII digits ("3", "+3", "1_000") or as a whole decimal
    ("3.0", "3."); ValueError for anything else ("2.5", "1e3", other scripts' digits,
    which ``int`` would take). One rule for single values and lists of K and M.

    Examples
    --------
    >>> parse_whole("3.0"), parse_whole(" +4 ")
    (3, 4)
    """
    if not text.isascii():
        raise ValueError(f"not ASCII digits: {text!r}")
    try:
        return int(text)
    except ValueError:
        pass
    whole, point, zeros = text.strip().partition(".")
    digits = whole[1:] if whole[:1] in ("+", "-") else whole
    if point and not zeros.strip("0") and digits.isdigit():
        return int(whole)
    raise ValueError(f"not a whole number: {text!r}")


class ValueListError(SettingSyntaxError):
    """A list of K or M values that does not parse."""


def _parse_values(text: str, name: str, *, allow_none: bool) -> list[int | None]:
    option = setting(name)
    values: list[int | None] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            if part.lower() in OFF_WORDS:  # the control off: K = 0, M = none
                values.append(None if allow_none else 0)
            elif ".." in part:
                low, high = (parse_whole(x) for x in part.split("..", 1))
                _check_range([low, high], name)
                if high < low:
                    raise ValueListError(
                        option + f": the range {part} runs backwards; write {high}..{low}"
                    )
                if high - low >= MAX_VALUES:
                    raise ValueListError(
                        option + f": the range {part} has more than {MAX_VALUES} values"
                    )
                values.extend(range(low, high + 1))
            else:
                values.append(parse_whole(part))
        except ValueError:
            expected = "whole numbers, ranges like 0..6 or off"
            raise ValueListError(option + f": expected {expected} (found {part!r})") from None
    _check_range(values, name)
    if not values:
        raise ValueListError(option + ": give at least one value")
    return list(dict.fromkeys(values))


def _check_range(values: Sequence[int | None], name: str) -> None:
    outside = [v for v in values if v is not None and not 0 <= v <= MAX_SETTING]
    if outside:
        raise ConfigError(
            setting(name)
            + f": values must be between 0 and {MAX_SETTING:,} (found {outside[0]:,}); "
            "give values a run can have"
        )


def sweep(
    prepared: PreparedLog,
    *,
    keep_versions: Sequence[int],
    max_preempts: Sequence[int | None],
    batch_groups: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SweepResult:
    """Replay every (K, M) combination over one prepared log; mark the Pareto front.

    ``progress(done, total)`` is called after each setting (the CLI draws a bar with it).
    """
    configs = [
        resolve_config(
            prepared, ReplayConfig(keep_versions=k, max_preempts=m, batch_groups=batch_groups)
        )
        for m, k in itertools.product(max_preempts, keep_versions)
    ]
    rows, notes = [], {}
    for done, config in enumerate(configs, start=1):
        # Only the row and the notes are kept: the full result goes before the next
        # setting is replayed (SettingReplays replays one again when asked for).
        result = replay(prepared, config)
        rows.append(sweep_row(result))
        notes.update(dict.fromkeys(result.summary.log_notes))
        del result
        if progress is not None:
            progress(done, len(configs))
    frame = pl.DataFrame(rows, schema=SWEEP_SCHEMA, orient="row")
    frame = frame.with_columns(pareto=pl.Series(pareto_front(frame), dtype=pl.Boolean))
    return SweepResult(rows=frame, results=SettingReplays(prepared, configs), notes=tuple(notes))


def _pct(counts: dict[str, int | None], key: str) -> float | None:
    value, total = counts[key], counts["total"]
    return None if value is None or not total else 100.0 * value / total


def sweep_row(result: ReplayResult) -> tuple[Any, ...]:
    """One replay's row of a sweep, in the order of ``SWEEP_SCHEMA`` (the pareto column a placeholder)."""
    summary = result.summary
    config = summary.config
    groups, samples, tokens = (summary.counts[u] for u in ("groups", "samples", "tokens"))
    span = summary.version_span["kept"]
    return (
        config.keep_versions,
        config.max_preempts,
        config.batch_groups,
        _pct(groups, Decision.KEPT),
        _pct(samples, Decision.KEPT),
        _pct(tokens, Decision.KEPT),
        _pct(groups, Decision.DROPPED_STALE),
        _pct(groups, Outcome.DROPPED_ARRIVAL.key),
        _pct(groups, Outcome.DROPPED_PENDING.key),
        _pct(groups, Decision.REJECTED_SPAN),
        _pct(groups, Decision.FAILED),
        summary.batches["emitted"],
        summary.version_gap["mean"],
        summary.version_gap["max"],
        span["mean"],
        span["max"],
        False,
        summary.token_weighted.get("version_gap_mean"),
        summary.token_weighted.get("version_span_mean_kept"),
        SIMPLE_LOOP_ENGINE,
    )


def pareto_front(rows: pl.DataFrame) -> list[bool]:
    """A row is efficient when no other keeps at least as much with no larger mean gap, one strictly."""
    kept_column = (
        "tokens_kept_pct" if rows["tokens_kept_pct"].null_count() == 0 else "samples_kept_pct"
    )
    points = list(zip(rows[kept_column].to_list(), rows["version_gap_mean"].to_list(), strict=True))
    efficient = []
    for kept, gap in points:
        if kept is None or gap is None:
            efficient.append(False)
            continue
        dominated = any(
            other_kept is not None
            and other_gap is not None
            and other_kept >= kept
            and other_gap <= gap
            and (other_kept > kept or other_gap < gap)
            for other_kept, other_gap in points
        )
        efficient.append(not dominated)
    return efficient
