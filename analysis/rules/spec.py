"""Staleness policies as values: Dressage's (K, M) and the batch-assembly rules of
prime-rl, verl v1 and NeMo-RL, each with its own knobs under its own names, and the
``name:knob=value,...`` text that names one (docs/semantics.md §13)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from analysis.engine.config import MAX_SETTING, ReplayConfig, k_label, m_label
from analysis.engine.grid import parse_whole
from analysis.errors import ConfigError, SettingSyntaxError, setting
from analysis.rules.grammar import ADMISSION_RULES, KnobText, split_spec

CLOCKS = ("own", "steps", "logged", "versions")
"""The clock a peer rule counts staleness on (docs/semantics.md §13.2): ``own`` (the
default) is the system's own step counter, ``logged`` where its log records it, else
``steps``."""


@dataclass(frozen=True)
class Policy:
    """A staleness policy: a name and its knobs. Subclasses hold the knobs as fields."""

    name: ClassVar[str] = ""
    source: ClassVar[str] = ""
    """Where the rule is in its system's source (repository, file, function)."""
    aliases: ClassVar[dict[str, str]] = {}
    """Short knob names accepted in a spec (``k`` for ``keep_versions``)."""
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}
    """Knobs that take a word, and the words they take."""

    def knobs(self) -> dict[str, Any]:
        """The knobs, by their own names, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def spec(self) -> str:
        """The text that names this policy: ``prime-rl:max_off_policy_steps=1``."""
        said = ",".join(f"{k}={'none' if v is None else v}" for k, v in self.knobs().items())
        return f"{self.name}:{said}"

    def label(self) -> str:
        """The spec without the knobs left at their defaults, for tables and legends:
        ``prime-rl:max_off_policy_steps=1``; it parses back to the same policy."""
        defaults = {f.name: f.default for f in fields(self)}
        said = ",".join(
            f"{k}={'none' if v is None else v}"
            for k, v in self.knobs().items()
            if v != defaults[k] or k in self.always_said
        )
        return f"{self.name}:{said}" if said else self.name

    always_said: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "spec": self.spec(),
            "label": self.label(),
            "knobs": self.knobs(),
        }

    def __str__(self) -> str:
        return self.spec()


@dataclass(frozen=True)
class DressagePolicy(Policy):
    """Dressage's two controls, replayed by the engine of docs/semantics.md §3-§4 unchanged."""

    name: ClassVar[str] = "dressage"
    source: ClassVar[str] = (
        "whisper-la/Dressage (dressage_staleness_keep_versions, --max-partial-rollout-preempts)"
    )
    aliases: ClassVar[dict[str, str]] = {"k": "keep_versions", "m": "max_preempts"}
    keep_versions: int = 0
    max_preempts: int | None = None

    def __post_init__(self) -> None:
        for short, name in self.aliases.items():
            value = getattr(self, name)
            whole = isinstance(value, int) and not isinstance(value, bool)
            if whole and not 0 <= value <= MAX_SETTING:
                raise ConfigError(
                    setting("policy", self.name) + f": require {short}= ({name}) between 0 "
                    f"and {MAX_SETTING:,} (found {value:,})"
                )
        ReplayConfig(keep_versions=self.keep_versions, max_preempts=self.max_preempts)

    def label(self) -> str:
        """``dressage:k=2,m=none``: both controls, by the short names of their spec; a
        control that is off reads as everywhere else: K as ``off``, M as ``none``."""
        return f"{self.name}:k={k_label(self.keep_versions)},m={m_label(self.max_preempts)}"

    def spec(self) -> str:
        """``dressage:keep_versions=off,max_preempts=none``: every knob, off as the label says."""
        return (
            f"{self.name}:keep_versions={k_label(self.keep_versions)},"
            f"max_preempts={m_label(self.max_preempts)}"
        )

    def config(self, batch_groups: int | None) -> ReplayConfig:
        return ReplayConfig(
            keep_versions=self.keep_versions,
            max_preempts=self.max_preempts,
            batch_groups=batch_groups,
        )


@dataclass(frozen=True)
class PeerPolicy(Policy):
    """A rule of another system that filters at batch assembly (docs/semantics.md §13).

    ``bound`` is the largest lag kept; the class variables say when the rule is applied
    and which waiting groups a batch takes first.
    """

    checks_on_arrival: ClassVar[bool] = True
    """A group already too stale when it completes is dropped then (a cancelled or
    aborted in-flight group is seen in a log as one that arrived and was dropped)."""
    sweeps_on_advance: ClassVar[bool] = True
    """Waiting groups are re-checked whenever the clock advances."""
    evicts_at_sample: ClassVar[bool] = False
    """Waiting groups are checked only when the trainer samples a batch."""

    @property
    def bound(self) -> int:
        raise NotImplementedError

    @property
    def clock_asked(self) -> str:
        """The ``clock`` knob as given (``own`` is resolved on a log: docs/semantics.md §13.2)."""
        clock: str = getattr(self, "clock", "own")
        return clock

    logged_by: ClassVar[tuple[str, ...]] = ()
    """The log formats that record this system's own step counter per group (the trainer
    step each group arrived at), so that ``clock=own`` reads it there."""

    @property
    def selection(self) -> str:
        """Which waiting groups a batch takes first: ``fifo`` (arrival), ``freshest``
        (newest start first) or ``oldest`` (oldest start first); ties by arrival."""
        return "fifo"


@dataclass(frozen=True)
class PrimeRLPolicy(PeerPolicy):
    """prime-rl ``orchestrator.max_off_policy_steps``: keep iff (step - 1) - start <= M."""

    name: ClassVar[str] = "prime-rl"
    source: ClassVar[str] = (
        "PrimeIntellect-ai/prime-rl src/prime_rl/orchestrator/utils.py (min_fresh_version), "
        "train_sink.py (_drop_stale), dispatcher.py (in-flight cancel)"
    )
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"clock": CLOCKS}
    always_said: ClassVar[tuple[str, ...]] = ("max_off_policy_steps",)
    logged_by: ClassVar[tuple[str, ...]] = ("prime-rl",)
    max_off_policy_steps: int = 8
    clock: str = "own"

    def __post_init__(self) -> None:
        _check_whole(self, "max_off_policy_steps", 0)
        _check_choice(self, "clock")

    @property
    def bound(self) -> int:
        return self.max_off_policy_steps


@dataclass(frozen=True)
class VerlDropPolicy(PeerPolicy):
    """verl v1 ``max_off_policy_threshold`` T with strategy ``drop``: evict at sample()
    when g - g0 + 1 > T; select the oldest-submitted first."""

    name: ClassVar[str] = "verl-drop"
    source: ClassVar[str] = (
        "volcengine/verl verl/trainer/ppo/v1/replay_buffer.py (ReplayBufferAsync."
        "_stale_terminal_keys, sample, ReplayBuffer._select_prompt_uids)"
    )
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"clock": CLOCKS}
    checks_on_arrival: ClassVar[bool] = False
    sweeps_on_advance: ClassVar[bool] = False
    evicts_at_sample: ClassVar[bool] = True
    always_said: ClassVar[tuple[str, ...]] = ("max_off_policy_threshold",)
    max_off_policy_threshold: int = 8
    clock: str = "own"

    def __post_init__(self) -> None:
        _check_whole(self, "max_off_policy_threshold", 1)
        _check_choice(self, "clock")

    @property
    def bound(self) -> int:
        return self.max_off_policy_threshold - 1

    @property
    def selection(self) -> str:
        return "oldest"


@dataclass(frozen=True)
class NemoWindowedPolicy(PeerPolicy):
    """NeMo-RL ``windowed`` sampler, ``max_staleness_versions`` M: select ready groups with
    s - M <= start <= s, evict start < s - M, abort in-flight groups below the window."""

    name: ClassVar[str] = "nemo-windowed"
    source: ClassVar[str] = (
        "NVIDIA-NeMo/RL nemo_rl/algorithms/async_utils/staleness_sampler.py (WindowedSampler."
        "select, should_abort_inflight; BaseSampler.evict)"
    )
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"order": ("fifo", "freshest"), "clock": CLOCKS}
    always_said: ClassVar[tuple[str, ...]] = ("max_staleness_versions",)
    max_staleness_versions: int = 1
    """NeMo-RL's default (``WindowedSamplerConfig``)."""
    order: str = "fifo"
    clock: str = "own"

    def __post_init__(self) -> None:
        _check_whole(self, "max_staleness_versions", 0)
        _check_choice(self, "order")
        _check_choice(self, "clock")

    @property
    def bound(self) -> int:
        return self.max_staleness_versions

    @property
    def selection(self) -> str:
        return self.order


POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (DressagePolicy, PrimeRLPolicy, VerlDropPolicy, NemoWindowedPolicy)
}


def known_policies() -> str:
    """Every policy and its knobs, for a hint: ``dressage:k=,m= | prime-rl:...``."""
    said = []
    for name, cls in POLICIES.items():
        knobs = [f"{f.name}={'|'.join(cls.choices.get(f.name, ()))}" for f in fields(cls)]
        said.append(f"{name}:{','.join(knobs)}")
    return "; ".join(said)


def parse_policy(text: str) -> Policy:
    """A policy from its spec: ``name`` or ``name:knob=value,knob=value``.

    Examples
    --------
    >>> parse_policy("dressage:k=2,m=1")
    DressagePolicy(keep_versions=2, max_preempts=1)
    >>> parse_policy("nemo-windowed:order=freshest").spec()
    'nemo-windowed:max_staleness_versions=1,order=freshest,clock=own'
    """
    spec = split_spec(text)
    cls = POLICIES.get(spec.name)
    if cls is None:
        admission = spec.name
        if admission in ADMISSION_RULES:
            bound = ADMISSION_RULES[admission][0]
            raise SettingSyntaxError(
                setting("policy", text) + f": {admission} is admission control, not a policy "
                "replayed here: give it as " + setting("admission", f"{admission}:{bound}=N") + " "
                "to inspect or simulate (docs/semantics.md §13.6)"
            )
        raise SettingSyntaxError(
            setting("policy", text) + f": no policy named {spec.written_name!r}; "
            f"known: {known_policies()}"
        )
    values: dict[str, Any] = {}
    for part in spec.knobs:
        knob, value = _knob(cls, part, text)
        if knob in values:
            raise SettingSyntaxError(
                setting("policy", text) + f": {knob} is given twice; give each knob once"
            )
        values[knob] = _knob_value(cls, knob, value, text)
    return cls(**values)


def _knob_names(cls: type[Policy]) -> str:
    """``keep_versions (k), max_preempts (m)``: a policy's knobs, with their short names."""
    short = {name: alias for alias, name in cls.aliases.items()}
    return ", ".join(
        f"{f.name} ({short[f.name]})" if f.name in short else f.name for f in fields(cls)
    )


def _knob(cls: type[Policy], part: KnobText, text: str) -> tuple[str, str]:
    """One ``knob=value`` of a spec: the knob's own name and the value's text."""
    written, equals, value = part.knob, part.equals, part.value
    knob = cls.aliases.get(written.lower(), written.lower())
    if knob not in {f.name for f in fields(cls)}:
        raise SettingSyntaxError(
            setting("policy", text) + f": {written!r} is not a {cls.name} knob; its knobs: "
            f"{_knob_names(cls)} (known: {known_policies()})"
        )
    if not equals or not value:
        raise SettingSyntaxError(
            setting("policy", text) + f": {written} needs a value: write {written}=VALUE"
        )
    return knob, value


def defaults_applied(policy: Policy, text: str) -> dict[str, Any]:
    """The bound knobs (those a label always says) that ``text`` left at their default:
    ``prime-rl`` alone is ``max_off_policy_steps=8``, which a caller may want to say."""
    given = set()
    for part in split_spec(text).knobs:
        written = part.knob.lower()
        given.add(policy.aliases.get(written, written))
    knobs = policy.knobs()
    return {name: knobs[name] for name in policy.always_said if name not in given}


def _knob_value(cls: type[Policy], field_name: str, value: str, text: str) -> Any:
    if field_name in cls.choices:
        return value.lower()
    if value.lower() in ("none", "off") and field_name == "max_preempts":
        return None
    if value.lower() in ("none", "off") and field_name == "keep_versions":
        return 0
    try:
        return parse_whole(value)
    except ValueError:
        raise SettingSyntaxError(
            setting("policy", text) + f": {field_name} must be a whole number (found {value!r})"
        ) from None


def _check_whole(policy: Policy, name: str, low: int) -> None:
    value = getattr(policy, name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_SETTING:
        raise ConfigError(
            setting("policy", policy.name) + f": require {name} between {low} and "
            f"{MAX_SETTING:,} (found {_said(value)})"
        )


def _said(value: object) -> str:
    """A value in an error: whole numbers as ``2,000,000`` (as every range error says)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return repr(value)


def _check_choice(policy: Policy, name: str) -> None:
    value, allowed = getattr(policy, name), policy.choices[name]
    if value not in allowed:
        raise ConfigError(
            setting("policy", policy.name) + f": {name} is one of "
            f"{', '.join(allowed)} (found {value!r})"
        )
