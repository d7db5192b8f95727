"""Stand-ins that rebuild NumPy arrays and torch tensors from a pickle as plain lists.

slime and Dressage dumps hold a few arrays (torch tensors of log-probs in train dumps, a
NumPy array of routed experts in rollout dumps). The safe unpickler hands the globals
they name to these classes instead of NumPy's or torch's: each only decodes numbers from
bytes with :mod:`struct`, checks every size and bound against the bytes it was given,
and never imports NumPy or torch, so nothing from the file runs. The result answers
``tolist()``, as a real array would, and is decoded only then.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any

MAX_ARRAY_VALUES = 1 << 24
"""Most numbers (and nested lists) one array may make: 16.7 million, more than a sample's
routed experts (tokens x layers x top-k) at 32k tokens."""

MAX_FILE_VALUES = 1 << 25
"""Most numbers (and nested lists) all the arrays of one file may make together: 33.5
million, a few hundred MB as Python lists. A file needing more is refused, not read until
memory runs out (tiny pickles can declare huge arrays, or reuse one storage many times)."""

_budget: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "array_budget", default=None
)


@contextlib.contextmanager
def file_budget(values: int = MAX_FILE_VALUES) -> Iterator[None]:
    """Count every array made while reading one file against ``values``, and the values
    of the storages it reads from the archive against as many (a storage is read whole
    as soon as it is named, whether or not a tensor uses it)."""
    token = _budget.set([values, values])
    try:
        yield
    finally:
        _budget.reset(token)


def _spend(shape: Sequence[int]) -> None:
    """Charge an array's size to the file's budget: its values, and a list for every
    row (so a shape like (10**8, 0), which holds no value, is charged its empty lists)."""
    cost, rows = 0, 1
    for size in shape:
        rows *= max(size, 1)
        cost += rows
        if cost > MAX_ARRAY_VALUES:
            raise ArrayError(
                f"an array of shape {tuple(shape)} (more than {MAX_ARRAY_VALUES:,} values)"
            )
    budget = _budget.get()
    if budget is not None:
        budget[0] -= cost
        if budget[0] < 0:
            raise ArrayError(f"the file's arrays hold more than {MAX_FILE_VALUES:,} values")


_NUMPY_FORMATS = {
    "b1": "?", "i1": "b", "u1": "B", "i2": "h", "u2": "H", "i4": "i", "u4": "I",
    "i8": "q", "u8": "Q", "f2": "e", "f4": "f", "f8": "d",
}  # fmt: skip
"""struct formats of the NumPy dtypes accepted (numbers and booleans only)."""

TORCH_STORAGES = {
    "BoolStorage": "?", "ByteStorage": "B", "CharStorage": "b", "ShortStorage": "h",
    "IntStorage": "i", "LongStorage": "q", "HalfStorage": "e", "FloatStorage": "f",
    "DoubleStorage": "d", "BFloat16Storage": "bf16",
}  # fmt: skip
"""struct formats of torch's typed storages (bf16 is decoded by hand)."""


class ArrayError(ValueError):
    """An array in a pickle that does not add up (its sizes disagree with its bytes)."""


def _decode(fmt: str, raw: bytes, order: str) -> list[Any]:
    if fmt == "bf16":  # the upper half of a float32
        halves = struct.unpack(f"{order}{len(raw) // 2}H", raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
    size = struct.calcsize(fmt)
    if len(raw) % size:
        raise ArrayError(f"{len(raw)} bytes are not a whole number of {size}-byte values")
    return list(struct.unpack(f"{order}{len(raw) // size}{fmt}", raw))


def _itemsize(fmt: str) -> int:
    return 2 if fmt == "bf16" else struct.calcsize(fmt)


def _count(shape: Sequence[Any]) -> int:
    """The number of values of an array of ``shape``, charged to the file's budget."""
    if not all(type(n) is int and n >= 0 for n in shape) or len(shape) > 64:
        raise ArrayError(f"shape {shape!r} is not a list of sizes")
    _spend(shape)
    count: int = math.prod(shape)
    return count


def _nest(flat: list[Any], shape: Sequence[int], strides: Sequence[int], offset: int) -> Any:
    if not shape:
        return flat[offset]
    if len(shape) == 1:
        return [flat[offset + i * strides[0]] for i in range(shape[0])]
    return [_nest(flat, shape[1:], strides[1:], offset + i * strides[0]) for i in range(shape[0])]


class NumpyDtype:
    """Stands in for ``numpy.dtype``: remembers the type code and the byte order."""

    def __init__(self, code: object = None, align: object = False, copy: object = True) -> None:
        if not isinstance(code, str) or code.lstrip("<>=|") not in _NUMPY_FORMATS:
            raise ArrayError(f"NumPy dtype {code!r} is not a plain number or boolean type")
        self.format = _NUMPY_FORMATS[code.lstrip("<>=|")]
        self.order = code[0] if code[0] in "<>" else "<"

    def __setstate__(self, state: Any) -> None:
        # (version, byte order, subarray, names, fields, itemsize, alignment, flags)
        if not isinstance(state, tuple) or len(state) < 5 or any(state[2:5]):
            raise ArrayError("structured and sub-array NumPy dtypes are not read")
        if state[1] in ("<", ">"):
            self.order = state[1]


class NumpyArrayType:
    """Stands in for ``numpy.ndarray``, the only class ``_reconstruct`` accepts."""

    def __setstate__(self, state: Any) -> None:  # a BUILD on the class itself
        raise ArrayError("a BUILD opcode on numpy.ndarray")


class NumpyArray:
    """An array being unpickled; ``__setstate__`` gets its shape, dtype and bytes."""

    def __init__(self) -> None:
        self._value: Any = None
        self._decode: Callable[[], Any] | None = None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) != 5:
            raise ArrayError("a NumPy array state of an unknown form")
        version, shape, dtype, fortran, raw = state
        if version != 1 or not isinstance(dtype, NumpyDtype) or not isinstance(shape, tuple):
            raise ArrayError("a NumPy array state of an unknown form")
        if not isinstance(raw, bytes):  # object arrays pickle their items: not read
            raise ArrayError("NumPy arrays of Python objects are not read")
        count = _count(shape)
        if len(raw) != count * _itemsize(dtype.format):
            raise ArrayError(f"a NumPy array of shape {shape} with {len(raw)} bytes")
        strides, step = [0] * len(shape), 1
        for axis in range(len(shape)) if fortran else reversed(range(len(shape))):
            strides[axis], step = step, step * shape[axis]

        def decode() -> Any:
            return _nest(_decode(dtype.format, raw, dtype.order), shape, strides, 0)

        self._decode = decode

    def tolist(self) -> Any:
        if self._decode is not None:
            self._value, self._decode = self._decode(), None
        return self._value


def numpy_reconstruct(kind: object, shape: object, code: object) -> NumpyArray:
    """Stands in for ``numpy.core.multiarray._reconstruct``."""
    if kind is not NumpyArrayType:
        raise ArrayError("only plain NumPy arrays are read (not a subclass)")
    return NumpyArray()


def numpy_scalar(dtype: object, raw: object = b"") -> Any:
    """Stands in for ``numpy.core.multiarray.scalar``: one number."""
    if not isinstance(dtype, NumpyDtype) or not isinstance(raw, bytes):
        raise ArrayError("a NumPy scalar of an unknown form")
    if len(raw) != _itemsize(dtype.format):
        raise ArrayError(f"a NumPy scalar with {len(raw)} bytes")
    return _decode(dtype.format, raw, dtype.order)[0]


class TorchStorageType:
    """Stands in for one of torch's typed storage classes (``torch.FloatStorage``...)."""

    def __init__(self, name: str) -> None:
        self.format = TORCH_STORAGES[name]

    def __setstate__(self, state: Any) -> None:  # BUILD would set its format
        raise ArrayError("a BUILD opcode on a torch storage type")


def storage_bytes_expected(kind: TorchStorageType, numel: object) -> int:
    """How many bytes a storage of ``numel`` values of ``kind`` holds; checked against the
    archive member's size before it is read (a deflated member could inflate to GBs)."""
    if type(numel) is not int or not 0 <= numel <= MAX_ARRAY_VALUES:
        raise ArrayError(f"a storage of {numel!r} values (at most {MAX_ARRAY_VALUES:,})")
    budget = _budget.get()
    if budget is not None:
        budget[1] -= numel
        if budget[1] < 0:
            raise ArrayError(f"the file's storages hold more than {MAX_FILE_VALUES:,} values")
    return numel * _itemsize(kind.format)


class TorchStorage:
    """A tensor's storage: its bytes, read from the archive, decoded once when needed."""

    def __init__(self, kind: TorchStorageType, raw: bytes, numel: int) -> None:
        if not 0 <= numel <= MAX_ARRAY_VALUES:
            raise ArrayError(f"a storage of {numel:,} values (more than {MAX_ARRAY_VALUES:,})")
        if len(raw) != numel * _itemsize(kind.format):
            raise ArrayError(f"a storage of {numel:,} values with {len(raw):,} bytes")
        self.kind, self.raw, self.numel = kind, raw, numel
        self._flat: list[Any] | None = None

    def flat(self) -> list[Any]:
        if self._flat is None:
            self._flat = _decode(self.kind.format, self.raw, "<")
        return self._flat


class TorchTensor:
    """A tensor's view of a storage (offset, shape, strides), decoded on ``tolist()``."""

    def __init__(
        self, storage: object, offset: object, size: object, stride: object, *rest: object
    ) -> None:
        if not isinstance(storage, TorchStorage):
            raise ArrayError("a tensor without a storage read from the archive")
        if not (isinstance(size, tuple) and isinstance(stride, tuple) and type(offset) is int):
            raise ArrayError("a tensor of an unknown form")
        _count(size)
        if len(size) != len(stride) or not all(type(s) is int and s >= 0 for s in stride):
            raise ArrayError("a tensor whose strides do not fit its shape")
        last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True) if n)
        if offset < 0 or (math.prod(size) and last >= storage.numel):
            raise ArrayError("a tensor that reaches past its storage")
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def tolist(self) -> Any:
        return _nest(self.storage.flat(), self.size, self.stride, self.offset)
