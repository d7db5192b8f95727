"""Admission control: rules that bound staleness by not starting a group, run in the simulator.

AReaL, SkyRL, NeMo-RL's ``gated`` sampler and verl's fully-async recipe never drop stale
data at batch assembly: they hold generation back before it starts. A log of what was
generated cannot show what holding back would have produced, so the simulator runs them
(``simulate --admission SPEC``), beside Dressage's drop-at-assembly controls on the same
pipeline model. In the model, the trainer's version ``v`` is the number of weight updates
published so far, the groups are counted in the order they start (``n``, from 0; none is
ever rejected, so "accepted + running" is every group started), and ``B`` is the groups
per trainer step.

- ``areal:max_head_offpolicyness=ETA`` (AReaL ``areal/infra/staleness_manager.py``
  ``StalenessManager.get_capacity``): a group may start iff
  ``n < (ETA + v + 1) * B``; so a group is at most ``ETA`` versions older than the
  step that trains it (``floor(n / B) - v_start <= ETA``).
- ``skyrl:max_staleness_steps=S`` (SkyRL ``skyrl/train/fully_async_trainer.py``
  ``_AsyncStalenessManager``): capacity ``(S + g) * B - (accepted + running)`` with the
  1-indexed step ``g = v + 1``: the same bound as AReaL's with ``ETA = S``.
- ``nemo-gated:max_staleness_versions=M`` (NeMo-RL
  ``nemo_rl/algorithms/async_utils/staleness_sampler.py``, ``gated``): dispatch batch
  ``d = floor(n / B)`` is admitted iff ``d <= v + M``: again ``n < (M + v + 1) * B``.
  In this model the three coincide; in the real systems they differ in their clocks
  (AReaL's engine version, SkyRL's step being trained, NeMo's trainer version) and in
  what else they do (SkyRL checks again at consumption and only warns).
- ``verl-async:staleness_threshold=THETA`` (verl
  ``verl/experimental/fully_async_policy/fully_async_rollouter.py``): at most
  ``int(R * (THETA + 1) * T)`` samples start between two weight syncs, with ``R = B x
  samples per group`` and a sync every trainer step (``T = 1``, as the simulator
  publishes a version each step); a group of ``S`` samples may start iff fewer than that
  many samples started since the last sync. Its full-queue drop of the oldest sample is
  not modelled (the simulator's own queue bound holds generation back instead).
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.errors import ConfigError, setting

RULES: dict[str, str] = {
    "areal": "max_head_offpolicyness",
    "skyrl": "max_staleness_steps",
    "nemo-gated": "max_staleness_versions",
    "verl-async": "staleness_threshold",
}
"""Each admission rule's name and its one knob, as its system names it."""


@dataclass(frozen=True)
class Admission:
    """One admission rule and its knob's value (see the module docstring)."""

    rule: str
    value: float

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ConfigError(f"unknown admission rule {self.rule!r}: known are {', '.join(RULES)}")
        knob = RULES[self.rule]
        whole = self.rule != "verl-async"
        if not 0 <= self.value <= 1_000_000 or (whole and self.value != int(self.value)):
            kind = "a whole number" if whole else "a number"
            raise ConfigError(
                f"require {setting(knob, f'{self.value:g}')} to be {kind} from 0 to 1,000,000"
            )

    @property
    def spec(self) -> str:
        value = int(self.value) if self.rule != "verl-async" else self.value
        return f"{self.rule}:{RULES[self.rule]}={value}"

    def admits(
        self, *, started: int, version: int, started_since_update: int, batch_groups: int,
        samples_per_group: int,
    ) -> bool:  # fmt: skip
        """Whether the next group may start now."""
        if self.rule == "verl-async":
            limit = int(batch_groups * samples_per_group * (self.value + 1))
            return started_since_update * samples_per_group < limit
        return started < (int(self.value) + version + 1) * batch_groups


def parse_admission(text: str) -> Admission:
    """``RULE:KNOB=VALUE`` (or ``RULE:VALUE``), e.g. ``areal:max_head_offpolicyness=1``.

    Examples
    --------
    >>> parse_admission("areal:max_head_offpolicyness=1").spec
    'areal:max_head_offpolicyness=1'
    >>> parse_admission("verl-async:0.5").spec
    'verl-async:staleness_threshold=0.5'
    """
    rule, _, rest = text.strip().partition(":")
    rule = rule.strip().lower()
    known = "; ".join(f"{name}:{knob}=N" for name, knob in RULES.items())
    if rule not in RULES or not rest.strip():
        raise ConfigError(f"admission rule {text!r} not understood: use one of {known}")
    knob, equals, value = rest.partition("=")
    if not equals:
        knob, value = RULES[rule], knob
    if knob.strip() != RULES[rule]:
        raise ConfigError(
            f"admission rule {rule} has one knob, {RULES[rule]} (found {knob.strip()!r})"
        )
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(
            f"admission rule {rule}: {RULES[rule]} must be a number (found {value.strip()!r})"
        ) from None
    return Admission(rule, number)
