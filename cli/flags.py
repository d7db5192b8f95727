"""The library's settings said as this command line's flags, in one table.

Library messages refer to settings by keyword (:func:`analysis.errors.setting`); every
error, warning and note the command line shows is rendered through :func:`flagged`, so
that ``pass on_bad_record=skip`` reads ``pass --on-bad-record skip`` here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from analysis import detail_of, render

FLAGS = {
    "keep_versions": "--keep-versions",
    "max_preempts": "--max-preempts",
    "batch_groups": "--batch-groups",
    "order_by": "--order-by",
    "fields": "--field",
    "on_bad_record": "--on-bad-record",
    "trust_pickle": "--trust-pickle",
    "include_eval": "--eval",
    "train_dumps": "--train-dumps",
    "log_format": "--format",
    "admission": "--admission",
    "policy": "--policy",  # docs/semantics.md §13
    "bias": "--bias",
    "max_retries": "--max-retries",
    "loop": "--loop",  # docs/semantics.md §12.4
    # the limits that protect memory (analysis.table.limits): --limit NAME=VALUE
    "limits": "--limit",
    "max_record_bytes": "--limit max_record_bytes=",
    "max_inflation": "--limit max_inflation=",
    "max_pickle_values": "--limit max_pickle_values=",
    "max_pickle_reuse": "--limit max_pickle_reuse=",
    "max_pickle_bytes": "--limit max_pickle_bytes=",
    "max_depth": "--limit max_depth=",
    "max_spans": "--limit max_spans=",
    # simulate: SimulationConfig's parameters (max_turns, prompt_tokens and tool_tokens
    # have no flag, so they keep their keyword)
    "workers": "--workers",
    "n_groups": "--groups",
    "n_samples_per_prompt": "--samples-per-prompt",
    "max_active_groups": "--max-active-groups",
    "median_response_tokens": "--median-tokens",
    "max_response_tokens": "--max-tokens",
    "tail_sigma": "--tail-sigma",
    "train_step_time": "--train-step-time",
    "token_time": "--token-time",
    "multi_turn_fraction": "--multi-turn-fraction",
    "multi_segment_fraction": "--multi-segment-fraction",
    "partial_rollout": "--partial-rollout",
    "abort_fraction": "--abort-fraction",
    "log_prob_drift": "--log-prob-drift",
    "log_prob_noise": "--log-prob-noise",
    "seed": "--seed",
    "draws": "--draws",  # simulate --like RUN_FOLDER
}
"""Each library keyword that a message may name, as the flag that sets it here."""


def say_setting(name: str, value: str | None) -> str:
    """A setting as typed on this command line: ``--flag value``, or the bare flag for an
    on/off one; a setting without a flag keeps the library's ``name=value``."""
    flag = FLAGS.get(name)
    if flag is None:
        return name if value is None else f"{name}={value}"
    if flag.endswith("="):  # one of several settings behind one flag (--limit NAME=VALUE)
        return flag.rstrip("=") if value is None else f"{flag}{value}"
    return flag if value in (None, "True") else f"{flag} {value}"


def flagged(text: str) -> str:
    """A library message (or :class:`analysis.Message`) with its settings said as flags."""
    return render(text, say_setting)


def one_line(message: str) -> str:
    """Errors are one line: messages quoted from other libraries may span several."""
    return " ".join(message.split())


def flagged_dict(result: dict[str, Any]) -> dict[str, Any]:
    """A result's ``to_dict()`` with its notes and warnings said as flags, for ``--json``."""
    said: dict[str, Any] = {
        key: [flagged(text) for text in result[key]]
        for key in ("notes", "warnings")
        if key in result
    }
    # the detail behind a warning said in short (analysis.Explained), by its short line
    details = {
        flagged(text): flagged(detail)
        for text in result.get("warnings", ())
        if (detail := detail_of(text))
    }
    return {**result, **said, **({"warning_details": details} if details else {})}


@contextmanager
def options_refused_as_usage() -> Iterator[None]:
    """Options of the simple loop given for a run folder replayed as Dressage's loop
    (:class:`analysis.NotUsedError`): the option's shape for this input, a usage error
    (exit 2) naming the flags, in every command that reads a run folder."""
    import typer

    from analysis import NotUsedError

    try:
        yield
    except NotUsedError as error:
        raise typer.BadParameter(
            flagged(error.message), param_hint=", ".join(FLAGS[name] for name in error.unused)
        ) from None
