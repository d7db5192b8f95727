"""The parameters of the simulated pipeline (:class:`SimulationConfig`), checked when
made: a slip of the keyboard is refused before anything is simulated."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analysis.engine import MAX_SETTING
from analysis.errors import ConfigError, setting

if TYPE_CHECKING:
    from analysis.rules.admission import AdmissionRule


@dataclass(frozen=True)
class SimulationConfig:
    """Parameters of the pipeline model; every figure is in simulated seconds or tokens.

    Log-prob drift model (off while ``log_prob_drift`` is 0, and then no record carries
    log-probs, so the output is exactly that of a run without the model). When on, each
    record gets ``rollout_log_probs``, one per response token, drawn as
    ``-expovariate(2.0)``, and the trainer-side ``log_probs``: the rollout value plus a
    deviation drawn from ``N(0, log_prob_noise + log_prob_drift * behind)`` for a
    trainable token and exactly 0 for a tool token (loss mask 0). ``behind`` is the
    trainer's version when it consumes the token minus the token's own version; the
    trainer's version is the record's trainer step (``dressage_return_rollout_id``),
    because step s trains once s steps have published versions 1..s over the initial
    version 0. Both lists are rounded to 4 decimals. The draws come from a random stream
    of their own (seeded from ``seed``), so turning the model on changes no other field.

    Prompts (``n_prompts``): a group draws its prompt (``metadata.instance_id``,
    ``dapo_math_<prompt>``) from a dataset of ``n_prompts``, round-robin, so prompts
    recur across epochs as in Dressage, whose artifacts identify a group attempt by
    (instance, start rollout, retry count) only. Two draws of one prompt starting in the
    same trainer step would share that key and merge, so a draw skips a prompt that has
    already started a group in the current step; the dataset stays ``n_prompts`` prompts
    while at most that many groups start in any one trainer step, and otherwise grows by
    one prompt for each group beyond it. Every simulated group has its own key.
    """

    n_groups: int = 64
    n_samples_per_prompt: int = 4
    max_active_groups: int = 16
    batch_groups: int = 4
    train_step_time: float = 20.0
    token_time: float = 0.01
    """Seconds per generated token of one trajectory (engines generate in parallel)."""
    median_response_tokens: int = 300
    tail_sigma: float = 0.9
    """Spread of the log-normal response length: larger means a heavier long tail."""
    max_response_tokens: int = 16_000
    prompt_tokens: int = 64
    multi_turn_fraction: float = 0.3
    max_turns: int = 4
    tool_tokens: int = 24
    multi_segment_fraction: float = 0.2
    partial_rollout: bool = True
    abort_fraction: float = 0.0
    """Groups whose first trajectory fails; its record is what Dressage keeps of a failed
    trajectory (status ``aborted``, the prompt only: no response tokens, no end version)."""
    log_prob_drift: float = 0.0
    """Growth of the trainer/rollout log-prob deviation per version behind; 0 turns it off."""
    log_prob_noise: float = 0.02
    """Spread of the deviation for a token of the trainer's own version (numerical noise)."""
    n_prompts: int = 16
    """Prompts in the dataset the groups are drawn from, round-robin (see above)."""
    output_queue_size: int = 1000
    """Completed groups the worker may hold for the trainer, as Dressage's
    ``DRESSAGE_ASYNC_OUTPUT_QUEUE_SIZE`` (default 1000): no new group starts while the
    queue holds 80% of it (Dressage's high watermark), so a slow trainer does not let
    completed groups pile up without bound."""
    admission: AdmissionRule | None = None
    """An admission rule (AReaL, SkyRL, NeMo-RL gated, verl fully-async; see
    ``analysis.rules.simulated_admission``) that holds a group back before it starts; None: none."""
    response_lengths: tuple[int, ...] = ()
    """When given, each trajectory's generated tokens are drawn uniformly from these
    (an empirical distribution, e.g. a real run's, see ``analysis.simulation.fit``) instead of the
    log-normal of ``median_response_tokens`` and ``tail_sigma``."""
    seed: int = 0

    def __post_init__(self) -> None:
        rules: list[tuple[tuple[str, ...], Callable[[Any], bool], str]] = [
            (("n_groups", "n_samples_per_prompt", "max_active_groups", "batch_groups",
              "median_response_tokens", "max_response_tokens", "max_turns", "n_prompts",
              "output_queue_size"),
             lambda v: v >= 1, ">= 1"),
            # As K, M and B: far beyond any run (a million groups is a 60 GB log already),
            # so that a slip of the keyboard does not start filling the disk.
            (("n_groups", "n_samples_per_prompt", "max_active_groups", "batch_groups",
              "median_response_tokens", "max_response_tokens", "max_turns", "prompt_tokens",
              "tool_tokens", "n_prompts"),
             lambda v: v <= MAX_SETTING, f"<= {MAX_SETTING:,}"),
            (("prompt_tokens", "tool_tokens"), lambda v: v >= 0, ">= 0"),
            (("train_step_time", "token_time", "tail_sigma"),
             lambda v: 0 < v < math.inf, "> 0 and finite"),
            (("multi_turn_fraction", "multi_segment_fraction", "abort_fraction"),
             lambda v: 0 <= v <= 1, "between 0 and 1"),
            (("log_prob_drift", "log_prob_noise"), lambda v: 0 <= v < math.inf, ">= 0 and finite"),
        ]  # fmt: skip
        for names, ok, rule in rules:
            for name in names:
                value = getattr(self, name)
                if not ok(value):
                    found = f"{value:,}" if type(value) is int else repr(value)
                    raise ConfigError("require " + setting(name) + f" {rule} (found {found})")
        if self.queue_watermark < self.batch_groups:
            raise ConfigError(
                "require " + setting("output_queue_size", self.output_queue_size) + " x 0.8 (the "
                "queue's high watermark) >= " + setting("batch_groups", self.batch_groups) + ": "
                "else the worker stops before the trainer has a batch"
            )
        if any(type(n) is not int or not 1 <= n <= MAX_SETTING for n in self.response_lengths):
            raise ConfigError(
                "require every one of " + setting("response_lengths", "...") + " to be a whole "
                f"number from 1 to {MAX_SETTING:,}"
            )

    @property
    def queue_watermark(self) -> int:
        """Completed groups at which no new group starts (80% of the queue, at least 1)."""
        return max(1, int(self.output_queue_size * 0.8))
