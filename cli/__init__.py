"""The dressage-replay command line (a thin typer layer over ``analysis``)."""

from __future__ import annotations

import signal
import sys

from cli.signals import Terminated, on_sigterm_unwind

__all__ = ["Terminated", "console", "on_sigterm_unwind", "run", "version_alone"]


def run() -> None:
    """Console-script entry point; importing the command line is itself interruptible.

    An interrupt while it is imported cannot be told by :mod:`cli.errors`, which is what is
    being imported: its exit code is ``analysis.ExitCode``'s rule, 128 + the signal."""
    on_sigterm_unwind()
    if (code := version_alone()) is not None:
        raise SystemExit(code)
    try:
        from cli.app import main
    except KeyboardInterrupt as interrupt:
        terminated = isinstance(interrupt, Terminated)
        sys.stderr.write("Terminated.\n" if terminated else "Interrupted.\n")
        raise SystemExit(128 + (signal.SIGTERM if terminated else signal.SIGINT)) from None
    main()


def console() -> None:
    """The ``dressage-replay`` script (and ``python -m cli``): :func:`run`, then the exit
    without the interpreter's tear-down when nothing waits for it. Freeing what NumPy,
    polars and pyarrow hold took 0.1 to 0.15 s of every command on the development
    machine, as much as half of ``import polars``. The outputs are written and closed by
    then (each in its own ``with``), and standard output and error are flushed here. The
    usual exit instead while a Python thread that is not a daemon runs, once Ray was used
    (its shutdown runs at exit), when a flush fails (the usual exit says so), or with
    ``DRESSAGE_REPLAY_FULL_EXIT`` set. (:func:`run` itself always exits the usual way: a
    caller in the same process goes on.)"""
    try:
        run()
    except SystemExit as done:
        if isinstance(done.code, int | None):
            _leave(done.code or 0)
        raise


def _leave(code: int) -> None:
    """``os._exit(code)`` once stdout and stderr are flushed, when nothing waits for the
    exit (see :func:`console`); else return, and the usual exit follows."""
    import os
    import threading

    main = threading.main_thread()
    if any(t is not main and not t.daemon for t in threading.enumerate()):
        return
    if "ray" in sys.modules or os.environ.get("DRESSAGE_REPLAY_FULL_EXIT"):
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except BaseException:
        return
    os._exit(code)


def version_alone() -> int | None:
    """``dressage-replay --version`` and nothing else, answered before typer and the
    commands are imported (a tenth of the time): what the app's own ``--version`` prints,
    with the same exit codes when standard output cannot take it. None for any other
    command line."""
    if sys.argv[1:] != ["--version"]:
        return None
    import os
    from importlib.metadata import PackageNotFoundError, version

    from analysis import ExitCode

    if sys.stdout is None:  # started with it closed (`>&-`)
        sys.stderr.write("Error: standard output is closed: nowhere to print the version\n")
        return ExitCode.OUTPUT
    try:
        number = version("dressage-replay")
    except PackageNotFoundError:  # run from a source tree that was never installed
        number = "unknown (not installed)"
    try:
        sys.stdout.write(f"dressage-replay {number}\n")
        sys.stdout.flush()
    except OSError as exc:
        # What it holds unwritten must not fail again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if isinstance(exc, BrokenPipeError):
            return ExitCode.STDOUT_GONE
        sys.stderr.write(f"Error: standard output: cannot write ({exc.strerror})\n")
        return ExitCode.OUTPUT
    return ExitCode.OK
