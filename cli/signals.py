"""Signals: SIGTERM unwinds the command as Ctrl-C does, so an output being written is
removed. Its own module, so that the command line's modules need not import the package
``cli`` (whose ``run`` imports them)."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typing takes tens of ms to import: a Ctrl-C there would be unguarded
    from typing import Any


class Terminated(KeyboardInterrupt):
    """Raised on SIGTERM (sent by ``kill``, ``timeout``, a job scheduler), so that the
    command unwinds as on Ctrl-C: an output being written is removed."""


_terminated = False


def _terminate(signum: int, frame: Any) -> None:
    global _terminated
    _terminated = True
    # Once: a second SIGTERM must not cut short the clean-up the first one starts.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated


def was_terminated() -> bool:
    """Whether SIGTERM has been received (typer ends some interrupts itself, quietly)."""
    return _terminated


def on_sigterm_unwind() -> None:
    """Turn SIGTERM into :class:`Terminated` (the default would end the process at once,
    leaving a half-written temporary file behind)."""
    signal.signal(signal.SIGTERM, _terminate)
    if getattr(sys.unraisablehook, "__name__", "") != "_terminated_in_finalizer":
        sys.unraisablehook = _terminated_in_finalizer


_previous_hook = sys.unraisablehook


def _terminated_in_finalizer(unraisable: Any) -> None:
    """A SIGTERM that lands in a finalizer (``__del__``, a weakref callback) is swallowed
    by Python, and the command would run on, SIGTERM ignored from then on. Deliver it
    again, a moment later, from another thread: the main thread then meets it where an
    exception unwinds the command."""
    global _terminated
    if not isinstance(unraisable.exc_value, Terminated):
        _previous_hook(unraisable)
        return
    import os
    import threading

    _terminated = False
    signal.signal(signal.SIGTERM, _terminate)
    threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGTERM)).start()
