"""Admission control run in the simulator (``simulate --admission RULE``).

AReaL, SkyRL, NeMo-RL's ``gated`` sampler and verl's fully-async recipe never drop stale
data at batch assembly: they hold a group back before it starts. A log can only show
which of its groups broke such a bound (``inspect --admission``,
:mod:`analysis.rules.admission`, whose rules, specs and sources these are); the simulator
runs them as real admission control, so "never generate it" can be set beside "drop it"
(``replay -k``) on the same pipeline model. In the model, the trainer's version ``v`` is
the number of weight updates published so far, groups are counted in the order they
start (``n``, from 0; none is rejected, so "accepted + running" is every group started),
and ``B`` is the groups per trainer step:

- ``areal:max_head_offpolicyness=ETA``: a group starts iff ``n < (ETA + v + 1) * B``;
- ``skyrl:max_staleness_steps=S``: capacity ``(S + g) * B - (accepted + running)`` with
  the 1-indexed step ``g = v + 1``: iff ``n < (S + v + 1) * B``;
- ``nemo-gated:max_staleness_versions=M``: dispatch batch ``d = floor(n / B)`` iff
  ``d <= v + M``: again ``n < (M + v + 1) * B``.

  So each started group has ``floor(n / B) - v_start <= bound``. In this model the three
  coincide; the real systems differ in their clocks and in what else they do
  (docs/semantics.md, "Admission bounds on a log").
- ``verl-async:staleness_threshold=THETA[,required_samples=R]``: a group starts iff the
  window's count is under ``int(R * (THETA + 1))``; at each weight update the count
  restarts at the groups still running or waiting for the trainer, and each start adds
  one. ``R`` (groups, verl's samples) defaults to ``B``; the simulator publishes weights
  every trainer step, so ``trigger_parameter_sync_step`` must be 1. The recipe's queue,
  which drops its oldest sample when full, is not modelled (the simulator's own queue
  bound holds generation back instead).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analysis.errors import ConfigError, setting

if TYPE_CHECKING:
    from analysis.rules.admission import AdmissionRule


def simulation_rule(spec: str, *, batch_groups: int) -> AdmissionRule:
    """The rule of ``spec`` as the simulator runs it (verl's R defaults to ``batch_groups``)."""
    from analysis.rules.admission import parse_admission

    rule = parse_admission(spec, required_samples=batch_groups)  # errors name the spec given
    if rule.system == "verl-async" and rule.knobs.get("trigger_parameter_sync_step", 1) != 1:
        raise ConfigError(
            setting("admission", spec) + ": the simulator updates the weights every trainer "
            "step: trigger_parameter_sync_step must be 1"
        )
    if rule.system == "verl-async" and rule.max_required < batch_groups:
        raise ConfigError(
            setting("admission", spec) + f": lets {rule.max_required} groups start between two "
            f"weight updates, fewer than the {batch_groups} a trainer step takes, so the "
            "pipeline would stop; raise staleness_threshold or required_samples"
        )
    if rule.step_offset is not None:
        raise ConfigError(
            setting("admission", spec) + ": step_offset reads a log's steps; the simulator's "
            "versions are its own steps: leave it out"
        )
    return rule


def admits(
    rule: AdmissionRule, *, started: int, version: int, window: int, batch_groups: int
) -> bool:
    """Whether the next group may start: ``started`` groups so far, ``version`` updates
    published, ``window`` verl's count since the last update."""
    if rule.system == "verl-async":
        return window < rule.max_required
    return started < (int(rule.bound) + version + 1) * batch_groups
