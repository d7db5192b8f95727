"""Which groups of a log would have broken another system's admission-control bound, and by
how much (docs/semantics.md, "Other systems' logs", admission bounds).

AReaL, SkyRL, verl's fully-async recipe and NeMo-RL's ``gated`` samplers block a group
before its generation starts; a log of what was generated cannot say what blocking would
have produced, only which of its groups started beyond the bound. Every rule here is
measured on two numbers per group: its **start version** s (the first real version of its
earliest trajectory: prime-rl's ``policy.start``, the first token version of a Dressage
record) and the **trained version** v of the step that consumed it (the group's trainer
step minus ``step_offset``; prime-rl's batch ``step`` trains version ``step - 1``).
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass
from typing import Any

import polars as pl

from analysis.errors import ConfigError, SettingSyntaxError, setting
from analysis.formats.registry import BY_NAME
from analysis.rules.grammar import ADMISSION_RULES, split_spec
from analysis.rules.spec import POLICIES
from analysis.table.labels import real_label

RULES = ADMISSION_RULES
"""Each rule's knobs, under its system's own names (the first is its bound)."""
ALIASES = {"eta": "max_head_offpolicyness"}
"""Short names accepted in a spec (AReaL's docs write η)."""
SOURCES = {
    "areal": "inclusionAI/AReaL areal/infra/staleness_manager.py StalenessManager.get_capacity",
    "skyrl": "NovaSky-AI/SkyRL skyrl/train/fully_async_trainer.py _AsyncStalenessManager",
    "nemo-gated": "NVIDIA-NeMo/RL nemo_rl/algorithms/async_utils/staleness_sampler.py "
    "_GatedSampler.admit",
    "verl-async": "volcengine/verl verl/experimental/fully_async_policy/fully_async_rollouter.py "
    "set_max_required_samples, update_param_version",
}
"""Where each rule is read from."""

GROUP_COLUMNS = ("group_id", "order", "start_version", "trainer_step", "trained_version")


@dataclass(frozen=True)
class AdmissionRule:
    """One admission-control rule and its knobs: ``areal:max_head_offpolicyness=1``
    (``areal:eta=1``), ``skyrl:max_staleness_steps=0``, ``nemo-gated:max_staleness_versions=1``,
    ``verl-async:staleness_threshold=0.5,required_samples=64,trigger_parameter_sync_step=1``.
    ``step_offset`` (any rule) says which version a trainer step trains: step - offset."""

    system: str
    knobs: dict[str, float] = dataclasses.field(default_factory=dict)
    step_offset: int | None = None
    """None: 1 for prime-rl logs, else 0 (the caller decides: :func:`default_step_offset`)."""

    @property
    def bound(self) -> float:
        return self.knobs[RULES[self.system][0]]

    @property
    def max_required(self) -> int:
        """verl's ``max_required_samples = int(R * (threshold + 1) * T)``, in groups."""
        knobs = self.knobs
        return int(
            knobs["required_samples"]
            * (knobs["staleness_threshold"] + 1)
            * knobs.get("trigger_parameter_sync_step", 1)
        )

    @property
    def spec(self) -> str:
        said = [f"{name}={_plain(value)}" for name, value in self.knobs.items()]
        if self.step_offset is not None:
            said.append(f"step_offset={self.step_offset}")
        return f"{self.system}:{','.join(said)}"


def _plain(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _whole_or_not(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def parse_admission(spec: str, *, required_samples: int | None = None) -> AdmissionRule:
    """An admission rule from its spec (see :class:`AdmissionRule`); ``required_samples``
    is verl-async's R when the spec does not give it (the simulator's batch size).

    Examples
    --------
    >>> parse_admission("areal:eta=1").spec
    'areal:max_head_offpolicyness=1'
    >>> parse_admission("verl-async:staleness_threshold=0.5,required_samples=4").max_required
    6
    """
    parsed = split_spec(spec)
    system = parsed.name
    if system not in RULES:
        raise SettingSyntaxError(setting("admission", spec) + ": " + _unknown_rule(system))
    knobs: dict[str, float] = {}
    offset: int | None = None
    for knob in parsed.knobs:
        item, equals, value = knob.item, knob.equals, knob.value
        name = ALIASES.get(knob.knob, knob.knob)
        if name not in (*RULES[system], "step_offset") or not equals:
            raise SettingSyntaxError(
                setting("admission", spec) + f": {item!r} is not one of {system}'s knobs "
                f"({', '.join((*RULES[system], 'step_offset'))}), written name=value"
            )
        number = _number(value, spec, name)
        if name == "step_offset":
            offset = int(number)
        else:
            knobs[name] = number
    if system == "verl-async" and required_samples is not None:
        knobs.setdefault("required_samples", float(required_samples))
    return _checked(AdmissionRule(system, knobs, offset), spec)


def _unknown_rule(system: str) -> str:
    """What to say of a rule name that is not one: a staleness policy points to --policy."""
    if system in POLICIES:
        return (
            f"{system} drops stale groups at batch assembly: it is a staleness policy, "
            "replayed as " + setting("policy", system) + ":KNOB=VALUE (docs/semantics.md §13), "
            "not an admission rule"
        )
    rules = [f"{name}:{knobs[0]}=N" for name, knobs in RULES.items() if name != "verl-async"]
    return (
        f"unknown rule {system!r}; write one of {', '.join(rules)}, or "
        "verl-async:staleness_threshold=X,required_samples=R (inspect needs R; simulate "
        "defaults it to the batch size)"
    )


def _number(value: str, spec: str, name: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise SettingSyntaxError(
            setting("admission", spec) + f": {name} must be a number (found {value!r})"
        ) from None
    if name != "staleness_threshold" and not number.is_integer():
        raise SettingSyntaxError(
            setting("admission", spec) + f": {name} must be a whole number (found {value!r})"
        )
    return number


def _checked(rule: AdmissionRule, spec: str) -> AdmissionRule:
    needed = RULES[rule.system][:2] if rule.system == "verl-async" else RULES[rule.system][:1]
    missing = [name for name in needed if name not in rule.knobs]
    if missing:
        raise SettingSyntaxError(
            setting("admission", spec)
            + f": give {', '.join(f'{name}=N' for name in missing)}"
            + (
                " (verl's samples per trainer step, in groups: a log does not record it)"
                if "required_samples" in missing
                else ""
            )
        )
    negative = [name for name, value in rule.knobs.items() if value < 0]
    if negative or (rule.system == "verl-async" and rule.max_required < 1):
        raise ConfigError(
            setting("admission", spec)
            + ": "
            + (
                f"{negative[0]} must not be negative (found {_plain(rule.knobs[negative[0]])}); "
                "give 0 or more"
                if negative
                else "allows no group at all: give a larger required_samples or staleness_threshold"
            )
        )
    return rule


def default_step_offset(formats: list[str] | tuple[str, ...]) -> int:
    """Which version a trainer step trains, as step - offset: prime-rl's batch ``step``
    trains version ``step - 1``; Dressage's and slime's rollout ``r`` is taken to train version
    ``r`` (one update per rollout, versions counted from 0)."""
    offsets = {BY_NAME[name].step_offset if name in BY_NAME else 0 for name in formats}
    return offsets.pop() if len(offsets) == 1 else 0


@dataclass(frozen=True)
class AdmissionReport:
    """Per group of the log: whether it broke the rule and by how much (``over``)."""

    rule: AdmissionRule
    step_offset: int
    groups: pl.DataFrame
    """``group_id, order, start_version, trainer_step, trained_version, measure, limit,
    over, violates``; ``measure`` is the lag v - s, or for verl-async the group's count
    since the last weight sync; ``over`` = measure - limit when positive, else 0."""

    @property
    def checked(self) -> int:
        return int(self.groups["violates"].is_not_null().sum())

    @property
    def unknown(self) -> int:
        """Groups without a start version or a trainer step: not checked."""
        return self.groups.height - self.checked

    @property
    def violations(self) -> int:
        return int(self.groups["violates"].sum() or 0)

    def to_dict(self) -> dict[str, Any]:
        over = self.groups.filter(pl.col("violates"))["over"]
        return {
            "rule": self.rule.spec,
            "source": SOURCES[self.rule.system],
            "step_offset": self.step_offset,
            "groups": self.groups.height,
            "checked": self.checked,
            "unknown": self.unknown,
            "violations": self.violations,
            "max_over": None if over.is_empty() else _whole_or_not(float(over.max())),  # type: ignore[arg-type]
            "mean_over": None if over.is_empty() else float(over.mean()),  # type: ignore[arg-type]
            "violating_groups": self.groups.filter(pl.col("violates"))["group_id"].to_list(),
        }


def group_clock(table: pl.DataFrame, step_offset: int) -> pl.DataFrame:
    """Per group, in order of first appearance: its start version (the smallest first real
    version of its records, as an integer; null when none is an integer) and the trainer
    step that consumed it (the largest of its records'), with the version that step trains."""
    first = table.select(
        "group_id",
        pl.col("version_spans")
        .list.eval(pl.element().struct.field("version"))
        .map_elements(_first_whole, return_dtype=pl.Int64)
        .alias("start"),
        "trainer_step",
    ).with_row_index("row")
    return (
        first.group_by("group_id", maintain_order=True)
        .agg(
            pl.col("row").min().alias("order"),
            pl.col("start").min().alias("start_version"),
            pl.col("trainer_step").max(),
        )
        .with_columns((pl.col("trainer_step") - step_offset).alias("trained_version"))
        .select(GROUP_COLUMNS)
    )


def _first_whole(labels: pl.Series) -> int | None:
    for label in labels:
        text = real_label(label)
        if text is not None:
            try:
                return int(text)
            except ValueError:
                return None
    return None


def admission_violations(
    table: pl.DataFrame, rule: AdmissionRule, *, formats: tuple[str, ...] = ()
) -> AdmissionReport:
    """Which groups of a canonical table would have broken ``rule``, and by how much."""
    offset = rule.step_offset if rule.step_offset is not None else default_step_offset(formats)
    groups = group_clock(table, offset)
    known = pl.col("start_version").is_not_null() & pl.col("trained_version").is_not_null()
    measure: pl.Expr | pl.Series
    if rule.system == "verl-async":
        measure = _since_sync(groups)
        limit = pl.lit(float(rule.max_required))
    else:
        measure = (pl.col("trained_version") - pl.col("start_version")).cast(pl.Float64)
        limit = pl.lit(float(rule.bound))
    groups = groups.with_columns(measure.alias("measure"), limit.alias("limit"))
    over = pl.col("measure") - pl.col("limit")
    groups = groups.with_columns(
        pl.when(known).then(pl.max_horizontal(over, pl.lit(0.0))).alias("over"),
        pl.when(known).then(over > 0).alias("violates"),
    )
    return AdmissionReport(rule, offset, groups)


def _since_sync(groups: pl.DataFrame) -> pl.Series:
    """verl's count for each group: the groups still running or queued when the weights
    moved to its start version (started earlier, consumed at that version or later), plus
    its own rank among the groups that started at that version, in log order."""
    known = groups.filter(
        pl.col("start_version").is_not_null() & pl.col("trained_version").is_not_null()
    )
    starts = known["start_version"].to_list()
    trained = known["trained_version"].to_list()
    # The groups carried into version x are those with s < x <= v: among the pairs with
    # s < v (the others carry into no version), #(s < x) - #(v < x), since v < x implies
    # s < x. Two sorted lists and a bisection per version, not a pass over every group.
    spans = [(s, v) for s, v in zip(starts, trained, strict=True) if s < v]
    opened = sorted(s for s, _ in spans)
    closed = sorted(v for _, v in spans)
    counts: dict[int, int] = {}
    carried: dict[int, int] = {}
    measure: dict[str, float] = {}
    for group, start in zip(known["group_id"].to_list(), starts, strict=True):
        if start not in carried:
            carried[start] = bisect.bisect_left(opened, start) - bisect.bisect_left(closed, start)
        counts[start] = counts.get(start, 0) + 1
        measure[group] = float(carried[start] + counts[start])
    return pl.Series(
        "measure", [measure.get(group) for group in groups["group_id"].to_list()], pl.Float64
    )
