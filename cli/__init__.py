"""The dressage-replay command line (a thin typer layer over ``analysis``)."""

from __future__ import annotations

import sys


def run() -> None:
    """Console-script entry point; importing the command line is itself interruptible."""
    try:
        from cli.main import main
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted.\n")
        raise SystemExit(130) from None
    main()
