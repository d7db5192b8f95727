"""The dressage-replay command line (a thin typer layer over ``analysis``)."""

from __future__ import annotations

import signal
import sys
from typing import Any

EXIT_TERMINATED = 143
"""Exit code after SIGTERM (128 + 15), as after Ctrl-C is 130."""


class Terminated(KeyboardInterrupt):
    """Raised on SIGTERM (sent by ``kill``, ``timeout``, a job scheduler), so that the
    command unwinds as on Ctrl-C: an output being written is removed."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated


def on_sigterm_unwind() -> None:
    """Turn SIGTERM into :class:`Terminated` (the default would end the process at once,
    leaving a half-written temporary file behind)."""
    signal.signal(signal.SIGTERM, _terminate)


def run() -> None:
    """Console-script entry point; importing the command line is itself interruptible."""
    on_sigterm_unwind()
    try:
        from cli.main import main
    except KeyboardInterrupt as interrupt:
        terminated = isinstance(interrupt, Terminated)
        sys.stderr.write("Terminated.\n" if terminated else "Interrupted.\n")
        raise SystemExit(EXIT_TERMINATED if terminated else 130) from None
    main()
