"""Run one command and report its exit status and peak resident memory, measured from a
process that holds almost nothing (see :func:`tests.hostile.run_bounded`).

    python -S tests/launch.py ADDRESS_SPACE_BYTES TIMEOUT_SECONDS COMMAND [ARG...]

Linux counts a forked child's resident size from its parent's (the pages they share), and
keeps the highest figure across ``exec``: a command started by pytest (a few hundred MB,
polars loaded) is measured at least that large. Started from this script instead, which
imports only built-in modules, the command's peak includes ~10 MB not its own.

The command runs with its address space limited to ADDRESS_SPACE_BYTES, its standard
input and output on /dev/null and its standard error this script's; it is killed after
TIMEOUT_SECONDS. The last line of this script's standard output is
``<wait status> <peak resident KiB> <CPU seconds>``, the CPU seconds being the command's
user and system time (``ru_utime + ru_stime``, its threads' and its reaped children's
included): unlike the time on the clock, it hardly grows when other processes share the
cores.
"""

import os
import resource
import signal
import sys


def main(argv: list[str]) -> int:
    guard, timeout, command = int(argv[1]), float(argv[2]), argv[3:]
    pid = os.fork()
    if pid == 0:  # the child: limited, then replaced by the command
        try:
            resource.setrlimit(resource.RLIMIT_AS, (guard, guard))
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.execvp(command[0], command)
        except BaseException as exc:
            os.write(2, f"launch: cannot run {command[0]} ({exc})\n".encode())
        finally:
            os._exit(127)

    def expire(_signal: int, _frame: object) -> None:
        os.kill(pid, signal.SIGKILL)

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    _, status, usage = os.wait4(pid, 0)  # (retried after the alarm's handler, PEP 475)
    signal.setitimer(signal.ITIMER_REAL, 0)
    print(status, usage.ru_maxrss, usage.ru_utime + usage.ru_stime, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
