"""The one grammar of a rule's text, ``name`` or ``name:knob=value,knob=value``, shared by
staleness policies (:mod:`analysis.rules.spec`) and admission rules
(:mod:`analysis.rules.admission`); each gives the names and values their meaning.

The admission rules' names and knobs are here too, as plain data, so that the policy parser
can tell a user who named an admission rule where it belongs without importing the
admission module (which imports the policies for the same reason the other way).
"""

from __future__ import annotations

from dataclasses import dataclass

ADMISSION_RULES: dict[str, tuple[str, ...]] = {
    "areal": ("max_head_offpolicyness",),
    "skyrl": ("max_staleness_steps",),
    "nemo-gated": ("max_staleness_versions",),
    "verl-async": ("staleness_threshold", "required_samples", "trigger_parameter_sync_step"),
}
"""Each admission rule's knobs, under its system's own names (the first is its bound)."""


@dataclass(frozen=True)
class KnobText:
    """One ``knob=value`` item of a spec, as written (each side stripped)."""

    item: str
    """The whole item."""
    knob: str
    equals: bool
    """Whether the item has an ``=``."""
    value: str


@dataclass(frozen=True)
class SpecText:
    """A spec split by the grammar: its name (stripped, lower case) and its knob items."""

    name: str
    written_name: str
    """The name as written (stripped), for messages."""
    knobs: tuple[KnobText, ...]


def split_spec(text: str) -> SpecText:
    """Split ``name:knob=value,...`` into its name and items; empty items are left out.

    Examples
    --------
    >>> split_spec(" Prime-RL: clock=steps, ,k ").knobs
    (KnobText(item='clock=steps', knob='clock', equals=True, value='steps'), KnobText(item='k', knob='k', equals=False, value=''))
    >>> split_spec(" Prime-RL: clock=steps").name
    'prime-rl'
    """
    name, _, rest = text.strip().partition(":")
    knobs = []
    for item in (part.strip() for part in rest.split(",")):
        if item:
            knob, equals, value = (piece.strip() for piece in item.partition("="))
            knobs.append(KnobText(item=item, knob=knob, equals=bool(equals), value=value))
    return SpecText(name=name.strip().lower(), written_name=name.strip(), knobs=tuple(knobs))


__all__ = ["ADMISSION_RULES", "KnobText", "SpecText", "split_spec"]
