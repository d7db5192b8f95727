"""Bounds on what an untrusted pickle may build, checked around the restricted unpickler.

Two checks, one before and one after CPython's (fast, C) unpickler runs:

* :func:`scan` walks the opcodes without building anything, refusing what would make
  the unpickler itself allocate at the file's word: a memo slot far past the objects
  made so far (the unpickler grows its memo table to twice the index: a 7-byte pickle
  can ask for gigabytes), or a length that runs past the end of the data. Runs of small
  numbers, most of a dump's bytes, are skipped by one regular expression.
* :func:`memory_budget`, around the unpickler, lowers the process's address-space
  limit to what it maps now plus ``max_pickle_bytes`` (where the system has one): a
  pickle of few bytes (a deflated ``data.pkl``) can make hundreds of millions of floats,
  each 32 bytes; past it the unpickler fails at once, with MemoryError.
* :func:`check_built` walks what was built, without recursion, and counts every object
  each time it is referenced (memo reuse lets a small pickle hold a list of a million
  references to a list of a million references...): past ``max_pickle_values`` it is
  refused, before anything downstream copies it out. It also refuses a container that
  contains itself and nesting deeper than ``max_depth``. Past :data:`AMPLIFICATION_FLOOR`
  values, the count may not pass ``max_pickle_reuse`` values a byte of the pickle either:
  a pickle without memo reuse spends a byte or more on each value it holds, and everything
  downstream (rows, spans, table) costs in proportion to the values counted, so a 76 KB
  pickle repeating one sample 8,000 times (128 million values, within
  ``max_pickle_values``) was 8,000 rows of 4,000 spans each (1.4 GB, then out of memory).
"""

from __future__ import annotations

import contextlib
import pickletools
import re
from collections.abc import Iterator
from typing import Any

from analysis.table.limits import Limits, mapped_bytes

_MEMO_SLACK = 1024
"""How far past the objects memoised so far a memo index may point (a pickler numbers
them in order, from 0)."""

# Argument layout of every opcode: a fixed size, a line, two lines, or a length prefix.
_FIXED, _LINE, _TWO_LINES, _COUNTED = range(4)
_COUNT_SIZES = {-2: (1, False), -3: (4, True), -4: (4, False), -5: (8, False)}
_LAYOUT: dict[int, tuple[int, int, bool]] = {}
for _op in pickletools.opcodes:
    _code = ord(_op.code)
    _n = _op.arg.n if _op.arg is not None else 0
    if _op.arg is not None and _op.arg.name.startswith("stringnl_noescape_pair"):
        _LAYOUT[_code] = (_TWO_LINES, 0, False)
    elif _n == -1:
        _LAYOUT[_code] = (_LINE, 0, False)
    elif _n in _COUNT_SIZES:
        _LAYOUT[_code] = (_COUNTED, *_COUNT_SIZES[_n])
    else:
        _LAYOUT[_code] = (_FIXED, _n, False)

_NUMBERS = re.compile(rb"(?:J....|G.{8}|M..|K.|[N\x88\x89])*+", re.DOTALL)
"""A run of small ints, floats, None and booleans (no memo, no length prefix)."""

_NUMBER_CODES = frozenset(b"JGMKN\x88\x89")

_PUT, _BINPUT, _LONG_BINPUT, _MEMOIZE, _STOP = ord("p"), ord("q"), ord("r"), 0x94, ord(".")

AMPLIFICATION_FLOOR = 1 << 20
"""Values (counted with every reference) a pickle may hold whatever its size, before the
count is held to ``max_pickle_reuse`` values a byte: small pickles of shared values are fine."""


class PickleTooBig(ValueError):
    """A pickle past a limit: ``name`` is the limit, ``what`` says what was found."""

    def __init__(self, what: str, name: str, value: int) -> None:
        super().__init__(what)
        self.what, self.name, self.value = what, name, value


def scan(data: bytes) -> None:
    """Refuse memo indices the unpickler would allocate a table for and lengths past the
    end of ``data`` (raises ValueError); the unpickler reports any other damage."""
    pos, end, memoised = 0, len(data), 0
    numbers, skip = _NUMBER_CODES, _NUMBERS.match
    while pos < end:
        if data[pos] in numbers:
            pos = skip(data, pos).end()  # type: ignore[union-attr]  # always matches
            if pos >= end:
                return
        code = data[pos]
        pos += 1
        layout = _LAYOUT.get(code)
        if layout is None:
            raise ValueError(f"unknown opcode {code:#04x} at byte {pos - 1}")
        start = pos
        kind, size, _ = layout
        pos = pos + size if kind == _FIXED else _argument_end(data, pos, layout)
        if pos > end:
            raise ValueError(f"an opcode at byte {start - 1} runs past the end of the data")
        if code in (_PUT, _BINPUT, _LONG_BINPUT):
            index = _memo_index(data, code, start, pos)
            if index > memoised + _MEMO_SLACK:
                raise ValueError(f"a memo index of {index:,} after {memoised:,} memoised objects")
            memoised = max(memoised, index + 1)
        elif code == _MEMOIZE:
            memoised += 1
        elif code == _STOP:
            return


def _argument_end(data: bytes, pos: int, layout: tuple[int, int, bool]) -> int:
    """Where the argument of an opcode that starts at ``pos`` ends (a line, two lines, or
    a length and that many bytes)."""
    kind, size, signed = layout
    if kind == _LINE:
        return _line_end(data, pos)
    if kind == _TWO_LINES:
        return _line_end(data, _line_end(data, pos))
    count = int.from_bytes(data[pos : pos + size], "little", signed=signed)
    return pos + size + max(count, 0)


def _line_end(data: bytes, pos: int) -> int:
    newline = data.find(b"\n", pos)
    if newline < 0:
        raise ValueError(f"a line at byte {pos} runs past the end of the data")
    return newline + 1


def _memo_index(data: bytes, code: int, start: int, end: int) -> int:
    if code == _PUT:
        text = data[start : end - 1]
        if not text.isdigit() or len(text) > 12:
            raise ValueError(f"a memo index {text[:20]!r}")
        return int(text)
    return int.from_bytes(data[start:end], "little")


_ATOMS = frozenset({int, float, bool, type(None), complex})
_SEQUENCES = (list, tuple, set, frozenset)
_TEXT = (str, bytes, bytearray)


def _cost(value: Any) -> int:
    return 1 + len(value) // 8 if isinstance(value, _TEXT) else 1


def _children(value: Any) -> list[Any] | None:
    """The values a container refers to other than plain numbers (counted by its size);
    None for a value that is not a container."""
    if isinstance(value, dict):
        return [item for pair in value.items() for item in pair if type(item) not in _ATOMS]
    if isinstance(value, _SEQUENCES):
        try:  # a list of numbers (the bulk of a dump) is told at C speed: it sums
            sum(value)
            return []
        except TypeError:
            return [item for item in value if type(item) not in _ATOMS]
    return None


def check_built(root: Any, limits: Limits, *, pickle_bytes: int | None = None) -> None:
    """Refuse (raise :class:`PickleTooBig` or ValueError) a built object that holds more
    than ``limits.max_pickle_values`` values counted with every reference (or, built from
    ``pickle_bytes`` bytes, more than ``limits.max_pickle_reuse`` values a byte past
    :data:`AMPLIFICATION_FLOOR`), nests deeper than ``limits.max_depth`` or contains
    itself. Each distinct container is walked once."""
    _Walk(limits, pickle_bytes).count(root)


class _Walk:
    """A depth-first walk without recursion that counts each container once (by id) and
    adds its count at every reference."""

    def __init__(self, limits: Limits, pickle_bytes: int | None = None) -> None:
        self.budget, self.deepest = limits.max_pickle_values, limits.max_depth
        self.refusal = _too_many(self.budget)
        if pickle_bytes is not None:
            ratio = limits.max_pickle_reuse
            amplified = max(AMPLIFICATION_FLOOR, ratio * pickle_bytes)
            if amplified < self.budget:
                self.budget = amplified
                self.refusal = PickleTooBig(
                    f"{pickle_bytes:,} bytes holding more than {amplified:,} values counted "
                    f"at every reference (more than {ratio:,} a byte: memo references repeat "
                    "what it holds)",
                    "max_pickle_reuse",
                    ratio,
                )
        self.done: dict[int, int] = {}  # id of a container walked -> its count
        self.open: set[int] = set()
        self.stack: list[list[Any]] = []  # [container, children not yet counted, count]

    def count(self, root: Any) -> int:
        total = self.enter(root)
        stack = self.stack
        while stack:
            children = stack[-1][1]
            while children:
                count = self.enter(children.pop())
                if count is None:
                    break
                self.add(count)
            else:
                value, _, count = stack.pop()
                self.open.discard(id(value))
                self.done[id(value)] = count
                if stack:
                    self.add(count)
                else:
                    total = count
        assert total is not None
        if total > self.budget:
            raise self.refusal
        return total

    def add(self, count: int) -> None:
        self.stack[-1][2] += count
        if self.stack[-1][2] > self.budget:
            raise self.refusal

    def enter(self, value: Any) -> int | None:
        """The count of ``value`` when known at once, else None (a frame was pushed)."""
        key = id(value)
        if key in self.done:
            return self.done[key]
        children = _children(value)
        if children is None:
            return _cost(value)
        if key in self.open:
            raise ValueError("a container that contains itself")
        if len(self.stack) >= self.deepest:
            raise PickleTooBig(
                f"values nested too deeply (more than {self.deepest} levels)",
                "max_depth",
                self.deepest,
            )
        self.open.add(key)
        own = 1 + len(value) * (2 if isinstance(value, dict) else 1) - len(children)
        self.stack.append([value, children, own])
        return None


def _too_many(budget: int) -> PickleTooBig:
    return PickleTooBig(
        f"more than {budget:,} values, counting each object every time it is referenced",
        "max_pickle_values",
        budget,
    )


@contextlib.contextmanager
def memory_budget(extra: int) -> Iterator[bool]:
    """While inside, the process may map at most ``extra`` bytes more than it maps now
    (the soft ``RLIMIT_AS``, put back after): the C unpickler then raises MemoryError
    past it instead of taking the machine's memory. Yields whether the limit was set (not
    where the system has no such limit or no ``/proc/self/statm``, or a lower one is set)."""
    mapped = mapped_bytes()
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        mapped = None
    if mapped is None:
        yield False
        return
    cap = mapped + extra
    unlimited = resource.RLIM_INFINITY
    if (soft != unlimited and soft <= cap) or (hard != unlimited and hard < cap):
        yield False
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield True
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
