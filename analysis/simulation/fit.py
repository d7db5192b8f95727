"""Fit the simulator to a real run (``simulate --like RUN``), and the figures that judge the fit.

The figures are computed the same way on the user's log and on a simulated one, so the
two columns of ``simulate --like`` compare like with like (docs: Simulate a pipeline, Fitted to your run):

- response tokens per trajectory (10%, 50%, 90% quantiles and the largest), over
  trajectories with at least one response token;
- trajectories per group (median) and groups per trainer step (the inferred batch size,
  or the rollout call's target in a run folder);
- step time: the median time between consecutive trainer steps. In a log whose records
  name their trainer step, step s is complete when its last record completed
  (``completed_at``); in a Dressage run folder, a step starts with its rollout call
  (``dressage_log.txt``);
- tokens per second: all response tokens over the time from the first completion to the
  last;
- the share of groups with a failed trajectory, and of trajectories written as more than
  one segment record.

What is fitted: the length distribution is the log's own (``response_lengths``: the
simulator draws from the log's lengths, so any quantile matches up to sampling), with
tool tokens 0 since the log's response tokens already hold them; trajectories per
group; groups per step; failure and multi-segment shares; and the two clocks, step time
and time per token, calibrated by simulating: each round scales them by how far the
simulated step time and tokens per second are from the log's. Groups in flight are not in
a log: the fit keeps the value given, else guesses twice the groups per step, and says so.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from analysis.errors import ConfigError
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.simulator import simulate
from analysis.table.limits import Limits

if TYPE_CHECKING:
    from analysis.engine import PreparedLog

CALIBRATION_ROUNDS = 8
CALIBRATION_GROUPS = 400
"""Groups simulated in each calibration round (at least the log's own count)."""
MAX_LENGTHS = 1000
"""Lengths kept of the log's distribution (evenly spaced quantiles beyond this many)."""


@dataclass(frozen=True)
class RunFigures:
    """What a log says about its pipeline; ``None`` where the log does not carry it."""

    groups: int
    trajectories: int
    samples_per_prompt: float | None
    groups_per_step: int | None
    length_q10: float | None
    length_q50: float | None
    length_q90: float | None
    length_max: int | None
    step_time: float | None
    tokens_per_second: float | None
    failed_groups_pct: float | None
    multi_segment_pct: float | None

    def rows(self) -> list[tuple[str, float | int | None]]:
        """(label, value) in display order."""
        return [
            ("groups", self.groups),
            ("trajectories", self.trajectories),
            ("trajectories per group (median)", self.samples_per_prompt),
            ("groups per trainer step", self.groups_per_step),
            ("response tokens, 10% quantile", self.length_q10),
            ("response tokens, median", self.length_q50),
            ("response tokens, 90% quantile", self.length_q90),
            ("response tokens, largest", self.length_max),
            ("step time (s, median)", self.step_time),
            ("response tokens per second", self.tokens_per_second),
            ("groups with a failed trajectory (%)", self.failed_groups_pct),
            ("trajectories in several segments (%)", self.multi_segment_pct),
        ]


@dataclass(frozen=True)
class Fit:
    """A fitted simulation: its configuration, what was fitted from what, and the log's
    figures beside those of a run simulated with it."""

    config: SimulationConfig
    fitted: tuple[tuple[str, str, str], ...]
    """(parameter, value, where it comes from) for each parameter the fit set."""
    log: RunFigures
    simulated: RunFigures
    notes: tuple[str, ...] = ()
    """What the user should know about the fit (a filtered log, a clock it cannot read)."""

    def __repr__(self) -> str:
        return f"Fit({len(self.fitted)} parameters, {self.log.groups:,} groups in the log)"

    def to_dict(self) -> dict[str, Any]:
        """The fit as ``simulate --like LOG --json`` prints it: what was fitted, and the
        run's figures beside the simulated run's."""
        return {
            "model": "simulator",
            "fitted": [
                {"parameter": name, "value": value, "from": source}
                for name, value, source in self.fitted
            ],
            "run": dataclasses.asdict(self.log),
            "simulated": dataclasses.asdict(self.simulated),
            "notes": list(self.notes),
        }


def _median_step(times: Iterable[float | None]) -> float | None:
    ordered = sorted(t for t in times if t is not None and math.isfinite(t))
    gaps = [b - a for a, b in itertools.pairwise(ordered) if b > a]
    return statistics.median(gaps) if gaps else None


def log_figures(
    table: pl.DataFrame, *, call_starts: Iterable[float] = (), prepared: PreparedLog | None = None
) -> RunFigures:
    """The figures of a canonical table (``call_starts``: a run folder's rollout calls;
    ``prepared``: the table already prepared, so that it is not prepared again)."""
    from analysis.engine import prepare

    prepared = prepared if prepared is not None else prepare(table)
    trajectories = prepared.trajectories
    lengths: list[int] = (
        trajectories.filter(pl.col("tokens") > 0)["tokens"].to_list()
        if prepared.tokens_known
        else []
    )
    per_group: list[int] = prepared.groups["trajectories"].to_list()
    failed: list[bool] = prepared.groups["failed"].to_list()
    records: list[int] = trajectories["records"].to_list()
    calls = list(call_starts)
    if calls:
        step_time = _median_step(calls)
    else:
        stepped = table.filter(pl.col("trainer_step").is_not_null())
        ends = stepped.group_by("trainer_step").agg(pl.col("completed_at").max())
        step_time = _median_step(ends["completed_at"].to_list())
    times: list[float] = table["completed_at"].drop_nulls().to_list()
    wall = max(times) - min(times) if len(times) > 1 else 0.0
    return RunFigures(
        groups=prepared.n_groups,
        trajectories=prepared.n_trajectories,
        samples_per_prompt=float(statistics.median(per_group)) if per_group else None,
        groups_per_step=prepared.inferred_batch_groups,
        length_q10=_quantile(lengths, 0.1),
        length_q50=_quantile(lengths, 0.5),
        length_q90=_quantile(lengths, 0.9),
        length_max=max(lengths) if lengths else None,
        step_time=step_time,
        tokens_per_second=sum(lengths) / wall if wall > 0 and lengths else None,
        failed_groups_pct=100 * sum(failed) / len(failed) if failed else None,
        multi_segment_pct=100 * sum(r > 1 for r in records) / len(records) if records else None,
    )


def _quantile(values: list[int], q: float) -> float | None:
    """The q quantile, interpolated linearly between the two nearest values."""
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _lengths(prepared: PreparedLog) -> tuple[int, ...]:
    """The log's response tokens per trajectory (at most MAX_LENGTHS, as quantiles)."""
    if not prepared.tokens_known:
        return ()
    values = sorted(prepared.trajectories.filter(pl.col("tokens") > 0)["tokens"].to_list())
    if len(values) > MAX_LENGTHS:
        last = len(values) - 1
        values = [values[round(i * last / (MAX_LENGTHS - 1))] for i in range(MAX_LENGTHS)]
    return tuple(int(v) for v in values)


def simulated_figures(config: SimulationConfig, *, trainer_clock: bool = True) -> RunFigures:
    """The figures of the log ``config`` simulates. With ``trainer_clock``, its step time is
    read off the simulated trainer (as a run folder's rollout calls time the real one);
    else off its log's completions, as a log without rollout calls is read."""
    from analysis.formats.load import records_to_table

    updates: list[float] = []
    table = records_to_table(list(simulate(config, update_times=updates)), source="<simulated>")
    figures = log_figures(table)
    if not trainer_clock:
        return figures
    return dataclasses.replace(figures, step_time=_median_step(updates))


def _probe(config: SimulationConfig) -> SimulationConfig:
    """The configuration simulated to judge a fit: at least CALIBRATION_GROUPS groups, so
    that sampling noise does not hide how close the fit is."""
    return dataclasses.replace(config, n_groups=max(config.n_groups, CALIBRATION_GROUPS))


def fit_simulation(
    table: pl.DataFrame,
    *,
    call_starts: Iterable[float] = (),
    samples_per_prompt: int | None = None,
    groups_per_step: int | None = None,
    given: Mapping[str, Any] | None = None,
) -> Fit:
    """Fit :class:`SimulationConfig` to a log. ``given`` holds parameters the user set
    (they win over the fit and are not calibrated); ``samples_per_prompt`` and
    ``groups_per_step`` are a run folder's own settings when known."""
    from analysis.engine import prepare

    given = dict(given or {})
    calls = list(call_starts)
    prepared = prepare(table)
    log = log_figures(table, call_starts=calls, prepared=prepared)
    if not log.groups:
        raise ConfigError("the run has no groups to fit the simulator to; point at a run's log")
    if groups_per_step:  # a run folder's own setting, where the table alone cannot tell
        log = dataclasses.replace(log, groups_per_step=groups_per_step)
    fitted = _fitted_values(prepared, log, samples_per_prompt, groups_per_step, given)
    values = {name: value for name, (value, _) in fitted.items()}
    values.update(given)
    trainer_clock = bool(calls)
    config = _calibrate(SimulationConfig(**values), log, given, fitted, trainer_clock)
    rows = [
        (name, _shown(getattr(config, name)), source)
        for name, (_, source) in fitted.items()
        if name not in given
    ]
    rows += [(name, _shown(value), "given") for name, value in given.items()]
    notes = [*prepared.warnings]
    if not trainer_clock and log.step_time is not None:
        notes.append(
            "step time: this log has no rollout calls, so it is read off the completion that "
            "finished each trainer step's last group, on the log and on the simulation alike; "
            "when groups wait for the trainer, that is the generation's pace, not the "
            "trainer's (a Dressage run folder times the rollout calls)"
        )
    simulated = simulated_figures(_probe(config), trainer_clock=trainer_clock)
    return Fit(config=config, fitted=tuple(rows), log=log, simulated=simulated, notes=tuple(notes))


def fit_run(
    path: str | Path, *, given: Mapping[str, Any] | None = None, limits: Limits | None = None
) -> Fit:
    """:func:`fit_simulation` of a log or a Dressage run folder, whose rollout calls time
    its steps and whose own samples per prompt and batch size are used; its files are
    read within ``limits`` (the defaults when None)."""
    from analysis.formats.dressage.run import is_run_folder, read_run
    from analysis.formats.load import load_logs

    calls: list[float] = []
    per_group = step_groups = None
    if is_run_folder(path):
        run = read_run(path, limits=limits or Limits())
        calls = [t for t in run.calls["started_at"].to_list() if t is not None]
        per_group, step_groups = run.samples_per_prompt, run.target_groups
    return fit_simulation(
        load_logs([path], **dataclasses.asdict(limits or Limits())), call_starts=calls, samples_per_prompt=per_group,
        groups_per_step=step_groups, given=given,
    )  # fmt: skip


def _fitted_values(
    prepared: PreparedLog,
    log: RunFigures,
    samples_per_prompt: int | None,
    groups_per_step: int | None,
    given: Mapping[str, Any],
) -> dict[str, tuple[Any, str]]:
    """(value, where it comes from) of each parameter the log tells, before calibration."""
    fitted: dict[str, tuple[Any, str]] = {}
    per_group = samples_per_prompt or (round(log.samples_per_prompt or 0) or None)
    if per_group:
        fitted["n_samples_per_prompt"] = (per_group, "trajectories per group")
    step_groups = groups_per_step or log.groups_per_step
    if step_groups:
        fitted["batch_groups"] = (step_groups, "groups per trainer step")
    # A length distribution given on the command line wins over the log's lengths.
    lengths = () if {"median_response_tokens", "tail_sigma"} & set(given) else _lengths(prepared)
    if lengths:
        fitted["response_lengths"] = (lengths, "the log's response tokens per trajectory")
        fitted["max_response_tokens"] = (max(lengths), "the log's longest response")
        fitted["tool_tokens"] = (0, "the log's response tokens hold its tool tokens")
    if log.multi_segment_pct is not None:
        fitted["multi_turn_fraction"] = (log.multi_segment_pct / 100, "trajectories in segments")
        fitted["multi_segment_fraction"] = (1.0, "every multi-turn trajectory in two segments")
    if log.failed_groups_pct is not None:
        fitted["abort_fraction"] = (log.failed_groups_pct / 100, "groups with a failure")
    fitted["n_groups"] = (log.groups, "groups in the log")
    if "max_active_groups" not in given:
        guess = 2 * (step_groups or 4)
        fitted["max_active_groups"] = (guess, "not in a log: a guess, 2 x groups per step")
    return fitted


def _calibrate(
    config: SimulationConfig,
    log: RunFigures,
    given: Mapping[str, Any],
    fitted: dict[str, tuple[Any, str]],
    trainer_clock: bool,
) -> SimulationConfig:
    """Scale step time and time per token until the simulated clocks match the log's
    (at most CALIBRATION_ROUNDS rounds; done once both are within 1%)."""
    tune_step = log.step_time is not None and "train_step_time" not in given
    tune_token = log.tokens_per_second is not None and "token_time" not in given
    if tune_step and log.step_time is not None:
        config = dataclasses.replace(config, train_step_time=log.step_time)
    if tune_token and log.tokens_per_second is not None:
        in_flight = config.max_active_groups * config.n_samples_per_prompt
        config = dataclasses.replace(config, token_time=in_flight / log.tokens_per_second)
    if not (tune_step or tune_token):
        return config
    probe = _probe(config)
    for _ in range(CALIBRATION_ROUNDS):
        sim = simulated_figures(probe, trainer_clock=trainer_clock)
        if _close(sim.tokens_per_second, log.tokens_per_second, tune_token) and _close(
            sim.step_time, log.step_time, tune_step
        ):
            break
        token_time, step_time = probe.token_time, probe.train_step_time
        if tune_token and sim.tokens_per_second and log.tokens_per_second:
            token_time *= sim.tokens_per_second / log.tokens_per_second
        if tune_step and sim.step_time and log.step_time:
            scaled = step_time * log.step_time / sim.step_time
            # A step cannot be longer than the run's own step time (rollout-bound runs
            # leave the trainer idle), nor vanish.
            step_time = min(log.step_time, max(0.05 * log.step_time, scaled))
        probe = dataclasses.replace(probe, token_time=token_time, train_step_time=step_time)
    if tune_step:
        fitted["train_step_time"] = (probe.train_step_time, "calibrated to the step time")
    if tune_token:
        fitted["token_time"] = (probe.token_time, "calibrated to tokens per second")
    return dataclasses.replace(
        config, train_step_time=probe.train_step_time, token_time=probe.token_time
    )


def _close(simulated: float | None, real: float | None, tuned: bool) -> bool:
    """Whether a calibrated figure is within 1% of the log's (or is not calibrated)."""
    return not tuned or (bool(simulated) and bool(real) and abs(simulated / real - 1) < 0.01)  # type: ignore[operator]


def _shown(value: Any) -> str:
    """A parameter's value as the fit table shows it: three significant digits."""
    if isinstance(value, tuple):
        return f"{len(value):,} lengths, median {statistics.median(value):g}" if value else "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(getattr(value, "spec", value))
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
