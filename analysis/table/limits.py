"""Limits that keep a hostile input from exhausting memory or time.

A log is data from elsewhere: a few kilobytes can declare gigabytes (a gzip or zip bomb,
a pickle that references one object a billion times). Each reader checks what it is
about to hold against one of these limits, and refuses the input with a one-line error
that names the limit and the setting that raises it (exit 5, as a damaged file). The
documentation's "Limits and bad input" page (docs/pages/reference/limits.md) lists them with their defaults.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, fields
from pathlib import Path

from analysis.errors import (
    ConfigError,
    DamagedFileError,
    InputNotFoundError,
    SettingSyntaxError,
    setting,
)

MiB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """The largest inputs read (each a setting of :class:`analysis.ReadOptions`)."""

    max_record_bytes: int = 32 * MiB
    """Largest JSONL line or JSON document (a record of a 128k-token trajectory with its
    log-probs and token versions is ~4 MB). It bounds token lists too: parsed, a line
    takes up to ~20 times its size (a list of 16 million one-digit numbers in 32 MB)."""
    max_inflation: int = 100
    """Largest ratio of decompressed to compressed bytes of a gzip stream or a deflated
    zip member, checked once more than :data:`INFLATION_FLOOR` (1 MiB) came out (real
    JSONL logs compress 3-15 times)."""
    max_pickle_values: int = 1 << 27
    """Most values one pickle may hold, each object counted every time it is referenced
    (so a billion references to one list count a billion times) and each 8 bytes of text
    as one: 134 million, beyond the largest real dumps (tens of millions of token ids,
    log-probs and mask values)."""
    max_pickle_reuse: int = 4
    """Most values a pickle may hold per byte of it (each counted every time it is
    referenced), past its first million: a pickle without memo reuse spends a byte or
    more on each value (real dumps hold 0.4 a byte), so memo references may repeat what
    a pickle holds only as far as a file this many times its size could. A 76 KB pickle
    repeating one sample 8,000 times, within ``max_pickle_values``, made 8,000 rows of
    4,000 spans (1.4 GB, then out of memory)."""
    max_pickle_bytes: int = 512 * MiB
    """Most memory that reading, inflating and building one untrusted pickle may take (a
    dump's samples, their token lists as Python lists: 8 bytes a small number, 32 a float
    or a larger number), held to it by the process's address-space limit while it runs
    (Linux). A dump of 4 million tokens with their mask, log-probs and versions takes
    ~350 MB; a deflated data.pkl of a few MB can ask for gigabytes."""
    max_depth: int = 100
    """Deepest nesting of lists and dicts in a pickle (real samples nest 4-6 deep)."""
    max_spans: int = 1 << 20
    """Most runs of token versions (spans) in one record: a million, where a real
    trajectory has one per weight version it saw and per tool turn (thousands at most).
    A list of alternating versions has one per token, and each is kept in the canonical
    table (32 bytes): past it, the record is a bad record."""

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    setting(item.name) + f": expected a whole number >= 1 (found {value!r})"
                )

    @staticmethod
    def names() -> tuple[str, ...]:
        return tuple(item.name for item in fields(Limits))

    @staticmethod
    def parse(items: list[str]) -> dict[str, int]:
        """``NAME=VALUE`` items as settings: a whole number, with an optional binary
        suffix K, M or G (``max_record_bytes=256M``).

        >>> Limits.parse(["max_record_bytes=1K", "max_depth=500"])
        {'max_record_bytes': 1024, 'max_depth': 500}
        """
        parsed: dict[str, int] = {}
        for item in items:
            name, _, text = item.partition("=")
            name = name.strip().replace("-", "_")
            if name not in Limits.names():
                raise SettingSyntaxError(
                    setting("limits") + ": expected NAME=VALUE with NAME one of "
                    f"{', '.join(Limits.names())} (found {item!r})"
                )
            match = re.fullmatch(r"(\d{1,18})([KMG]?)", text.strip(), re.IGNORECASE)
            if match is None:
                raise SettingSyntaxError(
                    setting("limits") + ": expected a whole number, maybe with K, M or G, "
                    f"for {name} (found {text!r})"
                )
            number, scale = (
                int(match.group(1)),
                1 << (10 * " KMG".index(match.group(2).upper() or " ")),
            )
            parsed[name] = number * scale
        return parsed


DEFAULT_LIMITS = Limits()
LIMIT_NAMES = Limits.names()

INFLATION_FLOOR = 1 * MiB
"""Decompressed bytes read before the inflation ratio is checked: small files of very
repetitive records may compress far more than logs do."""


class LimitError(DamagedFileError):
    """An input past one of the :class:`Limits` (exit 5, as a damaged file, and skipped
    as one under ``on_bad_record='skip'``)."""


def over_limit(where: object, what: str, name: str, value: int) -> LimitError:
    """The error of an input past a limit: what it holds, and the setting that raises it
    (to twice what it is, or more)."""
    return LimitError(
        f"{where}: {what}, past the limit {name}={value:,} that protects memory; if the "
        "file is genuine, raise it with " + setting(name, value * 2)
    )


def is_pipe(path: Path) -> bool:
    """Whether ``path`` is a pipe or a FIFO (``<(gzip -c log)``, ``mkfifo``): it can be
    opened and read once only, so it is never opened to probe it."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def check_regular(path: Path) -> None:
    """Refuse an input that is not a regular file (a link to /dev/zero or /dev/urandom,
    a device) before reading it: such a file has no end. Pipes and FIFOs are read (they
    end when their writer does), bounded by the limits above."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # opening it fails the same way, and says so
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        raise InputNotFoundError(
            f"{path}: not a regular file (a device or socket, which may never end); "
            "give the log file itself"
        )


def printable(text: str) -> str:
    """A path's text as it can be stored and printed: a name that is not UTF-8 keeps its
    bytes as ``\\xff`` escapes (Python decodes them as lone surrogates, which no table,
    JSON or terminal takes)."""
    if text.isascii():
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def mapped_bytes() -> int | None:
    """Bytes the process maps now (its address space, as ``RLIMIT_AS`` counts it), from
    Linux's /proc; None elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def memory_room() -> int | None:
    """Bytes of memory the process may still take: the least of what its address-space
    limit leaves over what it maps, and the machine's available memory and free swap
    (Linux's /proc); None where neither is known."""
    rooms = []
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        mapped = mapped_bytes()
        if soft != resource.RLIM_INFINITY and mapped is not None:
            rooms.append(soft - mapped)
    except (ImportError, OSError, ValueError):
        pass
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            sizes = dict(line.split(b":", 1) for line in meminfo.read().splitlines())
        rooms.append(
            sum(int(sizes[key].split()[0]) << 10 for key in (b"MemAvailable", b"SwapFree"))
        )
    except (OSError, ValueError, KeyError, IndexError):
        pass
    return max(min(rooms), 0) if rooms else None
