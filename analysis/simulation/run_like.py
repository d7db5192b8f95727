"""``simulate --like RUN`` of a Dressage run folder: the run's fitted model
(:mod:`analysis.simulation.run_model`, the one a sweep's ``model_*`` columns draw from)
simulated on Dressage's loop (:mod:`analysis.simulation.run_loop_sim`) at a setting, by
default the run's own, over several draws, beside the run's own replay at its own
setting; and the records of a simulated run (docs/semantics.md §12.8).

The figures compared, on the run (``replay RUN`` at its own K) and on each draw:
trainer steps (the calls that returned a full batch of B groups), kept groups, stale
drops, span rejections, other failures, the surplus the fully loop threw away,
leftovers, the kept share of decided attempts (all but leftovers and, on the run,
``unknown``), the mean version gap of kept trajectories, and, on the simulation, the
share of decided attempts that rest on modelled events (a draw or retry the run did not
make, or a trajectory whose tokens are not on disk).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from analysis.engine.run_loop.checks import keep_versions_told
from analysis.engine.run_loop.replay import LoopReplay, replay_run, replay_what_if
from analysis.engine.run_loop.sweep import own_max_preempts
from analysis.errors import ConfigError, setting
from analysis.formats.dressage.run import RunLog, read_run
from analysis.simulation.parameters import SimulationConfig
from analysis.simulation.predict import check_draws
from analysis.simulation.run_loop_sim import SimAttempt, SimRun, SimTrajectory, simulate_run
from analysis.simulation.run_model import RunModel, fit_run_model
from analysis.simulation.simulated_records import instance_id, session_id
from analysis.simulation.simulator import SIMULATED_EPOCH
from analysis.table.limits import Limits

LIKE_DRAWS = 5
"""Simulations of the run by default (seeds ``seed`` .. ``seed + 4``)."""
OWN: Literal["own"] = "own"
"""A setting left to the run's own."""
GIVEN_FIELDS = {
    "token_time": "seconds per generated token",
    "max_active_groups": "groups in flight",
    "batch_groups": "groups per trainer step (B)",
    "train_step_time": "seconds per trainer step",
}
"""What may be given in place of the fitted model's value (:func:`like_run`'s ``given``)."""

FIGURES: tuple[tuple[str, str], ...] = (
    ("steps", "trainer steps (full batches)"),
    ("kept", "kept groups"),
    ("dropped_stale", "stale drops"),
    ("rejected_span", "span rejections"),
    ("failed", "other failures"),
    ("discarded_surplus", "surplus thrown away"),
    ("leftover", "leftovers"),
    ("kept_pct", "kept share of decided attempts (%)"),
    ("gap_mean", "mean kept version gap"),
    ("modelled_pct", "decided attempts modelled (%)"),
)
"""(key, label) of the figures compared, in display order."""


@dataclass(frozen=True)
class LikeRun:
    """A run folder and its fitted model simulated at one setting: the run's figures
    (its replay at its own setting), each draw's and their mean, low and high."""

    path: Path
    model: RunModel = field(repr=False)
    keep_versions: int
    max_preempts: int | None
    own_keep_versions: int
    own_max_preempts: int | None
    seed: int
    runs: tuple[SimRun, ...] = field(repr=False)
    run: dict[str, float | None]
    draws: tuple[dict[str, float | None], ...] = field(repr=False)
    notes: tuple[str, ...] = ()

    @property
    def at_own_setting(self) -> bool:
        return (self.keep_versions, self.max_preempts) == (
            self.own_keep_versions,
            self.own_max_preempts,
        )

    def simulated(self, how: Literal["mean", "low", "high"] = "mean") -> dict[str, float | None]:
        """Each figure's mean (or lowest, highest) over the draws (None where no draw has it)."""
        found: dict[str, float | None] = {}
        for key, _ in FIGURES:
            values = [float(v) for d in self.draws if (v := d[key]) is not None]
            if not values:
                found[key] = None
            elif how == "mean":
                found[key] = statistics.mean(values)
            else:
                found[key] = min(values) if how == "low" else max(values)
        return found

    def to_dict(self) -> dict[str, Any]:
        """The comparison as ``simulate --like RUN --json`` prints it."""
        mean, low, high = self.simulated(), self.simulated("low"), self.simulated("high")
        return {
            "run": str(self.path),
            "model": "dressage-loop-model",
            "loop": self.model.loop,
            "batch_groups": self.model.batch_groups,
            "own_setting": {
                "keep_versions": self.own_keep_versions,
                "max_preempts": self.own_max_preempts,
            },
            "simulated_setting": {
                "keep_versions": self.keep_versions,
                "max_preempts": self.max_preempts,
            },
            "draws": len(self.runs),
            "seeds": [self.seed + i for i in range(len(self.runs))],
            "figures": {
                key: {
                    "label": label,
                    "run": self.run[key],
                    "simulated": mean[key],
                    "simulated_low": low[key],
                    "simulated_high": high[key],
                    "difference": None
                    if mean[key] is None or self.run[key] is None
                    else mean[key] - self.run[key],  # type: ignore[operator]
                }
                for key, label in FIGURES
            },
            "fitted": {
                "token_time": self.model.token_time,
                "max_active_groups": self.model.max_active_groups,
                "update_pause": self.model.update_pause,
                "train_time_median": statistics.median(self.model.train_times)
                if self.model.train_times
                else None,
                "max_retries": self.model.max_retries,
                "calls": self.model.calls,
                "estimates": dict(self.model.estimates),
            },
            "notes": list(self.notes),
        }

    def records(self) -> Iterator[dict[str, Any]]:
        """The first draw's simulated run as records (:func:`sim_records`)."""
        return sim_records(self.runs[0], self.model, seed=self.seed)


def run_figures(replay: LoopReplay) -> dict[str, float | None]:
    """The compared figures of a run's replay (see the module's docstring)."""
    summary = replay.to_dict()
    groups = summary["groups"]
    decided = groups["total"] - groups["leftover"] - groups["unknown"]
    gap = summary["version_gap"]["mean"]
    return {
        "steps": summary["batches"]["emitted"],
        "kept": groups["kept"],
        "dropped_stale": groups["dropped_stale"],
        "rejected_span": groups["rejected_span"],
        "failed": groups["failed"],
        "discarded_surplus": groups["discarded_surplus"],
        "leftover": groups["leftover"],
        "kept_pct": 100.0 * groups["kept"] / decided if decided else None,
        "gap_mean": None if gap is None else float(gap),
        "modelled_pct": None,
    }


def sim_figures(sim: SimRun, batch_groups: int) -> dict[str, float | None]:
    """The compared figures of a simulated run (see the module's docstring)."""
    outcomes = Counter(a.outcome for a in sim.attempts)
    per_call = Counter(a.call for a in sim.attempts if a.outcome == "kept")
    decided = [a for a in sim.attempts if a.outcome != "leftover"]
    return {
        "steps": sum(1 for c in range(sim.calls) if per_call[c] >= batch_groups),
        "kept": outcomes["kept"],
        "dropped_stale": outcomes["dropped_stale"],
        "rejected_span": outcomes["rejected_span"],
        "failed": outcomes["failed"],
        "discarded_surplus": outcomes["discarded_surplus"],
        "leftover": outcomes["leftover"],
        "kept_pct": 100.0 * outcomes["kept"] / len(decided) if decided else None,
        "gap_mean": statistics.mean(sim.kept_gaps) if sim.kept_gaps else None,
        "modelled_pct": 100.0 * sum(a.modelled for a in decided) / len(decided)
        if decided
        else None,
    }


def _own_setting(
    run: RunLog, keep_versions: int | None, max_preempts: int | Literal["own"] | None
) -> tuple[int, int | None, list[str]]:
    """The run's own (K, M), and notes on how they were found."""
    notes = []
    told = keep_versions_told(run.metrics)
    if told is None:
        if keep_versions is None:
            raise ConfigError(
                f"{run.root}: the run's metrics (dressage_metrics.jsonl's staleness/* indices) do not "
                "tell its K; "
                "pass " + setting("keep_versions") + " as the run was made with"
            )
        told = keep_versions
        notes.append(f"the run's metrics do not tell its K: taken to be the K given ({told})")
    known, own_m = own_max_preempts(run)
    if not known:
        if max_preempts == OWN:
            raise ConfigError(
                f"{run.root}: the run's span rejections name several max_preempts "
                f"({', '.join(map(str, run.max_preempts))}); pass "
                + setting("max_preempts")
                + " to simulate"
            )
        own_m = max_preempts
        notes.append("the run's span rejections name several M: taken to be the M given")
    elif own_m is None:
        notes.append(
            "no span rejection names the run's M: taken to be none (off, or never reached)"
        )
    return told, own_m, notes


def like_run(
    path: str | Path,
    *,
    keep_versions: int | None = None,
    max_preempts: int | Literal["own"] | None = OWN,
    draws: int = LIKE_DRAWS,
    seed: int = 0,
    limits: Limits | None = None,
    run: RunLog | None = None,
    given: Mapping[str, float] | None = None,
) -> LikeRun:
    """Fit the model of a Dressage run folder and simulate its loop ``draws`` times
    (seeds ``seed`` ..) at (``keep_versions``, ``max_preempts``), each by default the
    run's own (K from its metrics, M as its span rejections name it, none when they name
    none); the run's figures are its replay at its own setting. ``run``: the folder
    already read; ``given``: values that replace the fitted model's
    (:data:`GIVEN_FIELDS`; ``train_step_time`` every trainer step's time)."""
    check_draws(draws)
    run = run if run is not None else read_run(path, limits=limits or Limits())
    own_k, own_m, notes = _own_setting(run, keep_versions, max_preempts)
    k = own_k if keep_versions is None else keep_versions
    m = own_m if max_preempts == OWN else max_preempts
    if keep_versions_told(run.metrics) is None:
        replay = replay_run(run, keep_versions=own_k)
    else:
        replay = replay_what_if(run, keep_versions=own_k)
    model = _with_given(fit_run_model(run), given or {})
    if given:
        shown = ", ".join(f"{name}={value:g}" for name, value in given.items())
        notes.append("given in place of the fitted model's: " + shown)
    sims = tuple(
        simulate_run(model, keep_versions=k, max_preempts=m, seed=seed + i) for i in range(draws)
    )
    return LikeRun(
        path=Path(path),
        model=model,
        keep_versions=k,
        max_preempts=m,
        own_keep_versions=own_k,
        own_max_preempts=own_m,
        seed=seed,
        runs=sims,
        run=run_figures(replay),
        draws=tuple(sim_figures(s, model.batch_groups) for s in sims),
        notes=tuple(notes),
    )


def _with_given(model: RunModel, given: Mapping[str, float]) -> RunModel:
    """The model with the values given in place of its fitted ones."""
    for name, value in given.items():
        if name not in GIVEN_FIELDS:
            raise ConfigError(
                f"{name} is not a value of a run's model; give one of {', '.join(GIVEN_FIELDS)}"
            )
        whole = name in ("max_active_groups", "batch_groups")
        low_ok = value >= 0 if name == "train_step_time" else value > 0
        if not low_ok or (whole and value != int(value)) or value > 1_000_000:
            raise ConfigError(
                f"require {name} to be a {'whole ' if whole else ''}number "
                f"{'>= 0' if name == 'train_step_time' else '> 0'} and at most 1,000,000 "
                f"(found {value!r}); pass " + setting(name) + " within that"
            )
    changes: dict[str, Any] = {
        name: int(value) if name in ("max_active_groups", "batch_groups") else float(value)
        for name, value in given.items()
        if name != "train_step_time"
    }
    if "train_step_time" in given:
        changes["train_times"] = (float(given["train_step_time"]),) * len(model.train_times)
    return dataclasses.replace(model, **changes)


_SHAPE = SimulationConfig()
"""Prompt and tool tokens of a record, as the generic simulator writes them."""


def sim_records(sim: SimRun, model: RunModel, *, seed: int = 0) -> Iterator[dict[str, Any]]:
    """A simulated run as records, one per trajectory, in the simulator's shape
    (:mod:`analysis.simulation.simulated_records`), attempts in the order they finished;
    attempts still generating when the run stopped are not written. A group is an
    attempt (``group_index`` its order of submission; ``metadata.instance_id`` its draw,
    ``dressage_start_rollout_id`` the call running when it was submitted,
    ``dressage_retry_count``); a kept one has ``dressage_return_rollout_id``, the call
    that kept it. ``metadata.simulated_outcome`` is the attempt's outcome (kept,
    dropped_stale, rejected_span, failed, leftover, discarded_surplus); a failed
    trajectory is written as the simulator writes one (status ``aborted``, the prompt
    only). Rewards are not modelled (null)."""
    finished = sorted(
        (a for a in sim.attempts if a.done_at is not None), key=lambda a: (a.done_at, a.order)
    )
    for attempt in finished:
        for member, trajectory in enumerate(attempt.trajectories):
            yield _record(attempt, member, trajectory, model, seed)


def _record(
    attempt: SimAttempt, member: int, trajectory: SimTrajectory, model: RunModel, seed: int
) -> dict[str, Any]:
    prompt, tool = _SHAPE.prompt_tokens, _SHAPE.tool_tokens
    labels, loss_mask = ["-1"] * prompt, []
    failed = trajectory.failed is not None
    for turn, runs in enumerate(() if failed else trajectory.turn_runs):
        if turn:
            labels += ["-1"] * tool
            loss_mask += [0] * tool
        for version, count in runs:
            labels += [str(version)] * count
            loss_mask += [1] * count
    spans: list[dict[str, Any]] = []
    for position, label in enumerate(labels):
        if spans and spans[-1]["version"] == label:
            spans[-1]["end"] = position + 1
        else:
            spans.append({"start": position, "end": position + 1, "version": label})
    trainable = [label for label, mask in zip(labels[prompt:], loss_mask, strict=True) if mask]
    session = session_id(seed, attempt.order, member)
    stamp = SIMULATED_EPOCH + (trajectory.finished_at or attempt.done_at or 0.0)
    metadata: dict[str, Any] = {
        "parent_traj_id": session,
        "session_id": session,
        "instance_id": instance_id(attempt.draw),
        "dressage_start_rollout_id": attempt.start_call,
        "dressage_retry_count": attempt.retry,
        "segment_index": 0,
        "full_versions": labels,
        "version_spans": spans,
        "dressage_start_token_version": trainable[0] if trainable else "-1",
        "dressage_end_token_version": trainable[-1] if trainable else "-1",
        "proxy_extra_info": {"timestamp": repr(stamp)},
        "simulated_outcome": attempt.outcome,
        "simulated_modelled": attempt.modelled,
    }
    if attempt.outcome == "kept":
        metadata["dressage_return_rollout_id"] = attempt.call
    token_base = (attempt.order * 7919) % 30_000
    return {
        "group_index": attempt.order,
        "index": attempt.order * model.samples_per_prompt + member,
        "tokens": list(range(token_base, token_base + len(labels))),
        "response_length": len(loss_mask),
        "loss_mask": loss_mask,
        "reward": None,
        "status": "aborted" if failed else "completed",
        "metadata": metadata,
    }


__all__ = [
    "FIGURES",
    "GIVEN_FIELDS",
    "LIKE_DRAWS",
    "LikeRun",
    "like_run",
    "run_figures",
    "sim_figures",
    "sim_records",
]
