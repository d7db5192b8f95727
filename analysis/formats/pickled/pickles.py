"""Read slime rollout dumps (``torch.save`` files and bare pickles) without trusting them.

A ``.pt`` file written by ``torch.save`` is a zip archive holding ``<name>/data.pkl``
and, for tensors, their bytes in ``<name>/data/<key>``. The restricted unpickler below
admits plain containers and scalars, and NumPy arrays and torch tensors rebuilt as lists
by the stand-ins of :mod:`analysis.formats.pickled.arrays` (no NumPy or torch code runs); anything
else from ``torch`` becomes :data:`SKIPPED` without importing torch, and every other
global is refused. Nothing from the file is ever executed on this path.
"""

from __future__ import annotations

import io
import pickle
import types
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.errors import DamagedFileError, LogFormatError, UnsafePickleError, setting
from analysis.formats.pickled import arrays, pickle_guard
from analysis.table.fieldmap import SKIPPED, Skipped
from analysis.table.limits import DEFAULT_LIMITS, INFLATION_FLOOR, Limits, check_regular, over_limit

ZIP_MAGIC = b"PK\x03\x04"

MAX_DIRECTORY_BYTES = 8 << 20
"""Most bytes of an archive's central directory (its list of members, 46 bytes and a name
each): some 100,000 members, where a torch.save file has one per tensor and four more.
zipfile builds an object per member, 7.6 s for a million of them (a 47 MB file)."""

READ_METHODS = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})
"""The compression methods of an archive member this reader inflates: torch.save stores
its members, and deflate is what other zip writers use. zipfile inflates a bzip2 or lzma
member a whole compressed chunk at a time, whatever size is asked for (2.6 KB of bzip2
became 3 GiB in one call): such a member is refused unread, not bounded."""


def unread_method(info: zipfile.ZipInfo) -> str | None:
    """The name of a member's compression method when this reader does not inflate it."""
    if info.compress_type in READ_METHODS:
        return None
    names = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}
    return names.get(info.compress_type, f"method {info.compress_type}")


def directory_bytes(tail: bytes) -> int | None:
    """The size of the central directory that the end of a zip archive (its last 64 KiB
    and 22 bytes) declares, as zipfile reads it; None when it does not say."""
    end = tail.rfind(b"PK\x05\x06")
    if end < 0 or len(tail) < end + 22:
        return None
    locator = end - 20  # zip64: its record, just before its locator, says (as zipfile reads)
    if locator >= 0 and tail[locator : locator + 4] == b"PK\x06\x07":
        record = locator - 56
        if record < 0 or tail[record : record + 4] != b"PK\x06\x06":
            return None
        return int.from_bytes(tail[record + 40 : record + 48], "little")
    return int.from_bytes(tail[end + 12 : end + 16], "little")


def _bytearray(*args: Any) -> bytearray:
    """``bytearray()`` of bytes or text, never ``bytearray(n)`` (n bytes of the file's
    choosing)."""
    return bytearray(_bytes(*args))


def _bytes(*args: Any) -> bytes:
    """``bytes()`` as protocol 2 writes it (``bytes()``, or text and an encoding), never
    ``bytes(n)``, which would allocate n bytes of the file's choosing."""
    if not args:
        return b""
    if len(args) == 2 and isinstance(args[0], str) and isinstance(args[1], str):
        return args[0].encode(args[1])
    if len(args) == 1 and isinstance(args[0], (bytes, bytearray)):
        return bytes(args[0])
    raise ValueError("bytes() of anything but text or bytes is not read")


def _encode(text: object, encoding: object = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol 2 writes bytes: text only (``str()`` of a nested list
    built from memo references could be gigabytes)."""
    if not isinstance(text, str) or not isinstance(encoding, str):
        raise ValueError("_codecs.encode of anything but text is not read")
    return text.encode(encoding)


class _Sealed:
    """An allowed callable as the unpickler sees it: it can be called, and a BUILD opcode
    on it is refused (BUILD sets attributes: on the function itself it would change its
    defaults, or a class's methods, for every later file of the process)."""

    __slots__ = ("_call",)

    def __init__(self, call: Callable[..., Any]) -> None:
        self._call = call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    def __setstate__(self, state: Any) -> None:
        raise ValueError("a BUILD opcode on an allowed callable")

    def __reduce__(self) -> Any:  # never pickled; keeps copy and pickle from guessing
        raise TypeError("not picklable")


# Globals that only rebuild plain values; none can run code of the file's choosing.
_SAFE_GLOBALS: dict[tuple[str, str], Any] = {
    ("builtins", "bytes"): _bytes,
    ("__builtin__", "bytes"): _bytes,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
    ("builtins", "bytearray"): _bytearray,
    ("__builtin__", "bytearray"): _bytearray,
    ("collections", "OrderedDict"): dict,
    ("_codecs", "encode"): _encode,
    # NumPy arrays and scalars (numpy 2 moved numpy.core to numpy._core), rebuilt as lists.
    ("numpy", "ndarray"): arrays.NumpyArrayType,
    ("numpy", "dtype"): arrays.NumpyDtype,
    ("numpy.core.multiarray", "_reconstruct"): arrays.numpy_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): arrays.numpy_reconstruct,
    ("numpy.core.multiarray", "scalar"): arrays.numpy_scalar,
    ("numpy._core.multiarray", "scalar"): arrays.numpy_scalar,
}


_SEALED: dict[tuple[str, str], Any] = {
    key: _Sealed(value) if isinstance(value, types.FunctionType) else value
    for key, value in _SAFE_GLOBALS.items()
}
"""What the unpickler is given: the functions sealed, the classes as they are (each
refuses BUILD: its ``__setstate__`` needs an instance)."""


def _rebuild_tensor(storage: Any, *args: Any) -> Any:
    """Stands in for ``torch._utils._rebuild_tensor_v2``; a tensor whose bytes are not at
    hand (a bare pickle) is skipped."""
    return SKIPPED if storage is SKIPPED else arrays.TorchTensor(storage, *args)


_SEALED_REBUILD_TENSOR = _Sealed(_rebuild_tensor)


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(
        self,
        file: io.BufferedIOBase,
        *,
        where: str,
        storage_bytes: Callable[[str, int], bytes] | None = None,
    ) -> None:
        super().__init__(file)
        self.where = where
        self.storage_bytes = storage_bytes
        self.storages: dict[str, arrays.TorchStorage] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SEALED:
            return _SEALED[(module, name)]
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _SEALED_REBUILD_TENSOR
        if module == "torch" and name in arrays.TORCH_STORAGES:
            return arrays.TorchStorageType(name)
        if module == "torch" or module.startswith("torch."):
            return Skipped
        raise UnsafePickleError.advised(
            f"{self.where}: the pickle needs {module}.{name}, which the safe reader does not load",
            "; pass " + setting("trust_pickle", True) + " if you trust this file (it may run code)",
        )

    def persistent_load(self, pid: Any) -> Any:
        """torch keeps a tensor's bytes out of band, in the archive: ``('storage', storage
        type, key, location, count)``. Anything else (or a bare pickle) is skipped."""
        if (
            self.storage_bytes is None
            or not isinstance(pid, tuple)
            or len(pid) != 5
            or pid[0] != "storage"
            or not isinstance(pid[1], arrays.TorchStorageType)
            or not (isinstance(pid[2], str) and pid[2].isdigit() and pid[2].isascii())
            or type(pid[4]) is not int
        ):
            return SKIPPED
        key = pid[2]
        if key not in self.storages:  # a storage shared by many tensors is read once
            expected = arrays.storage_bytes_expected(pid[1], pid[4])
            self.storages[key] = arrays.TorchStorage(
                pid[1], self.storage_bytes(key, expected), pid[4]
            )
        return self.storages[key]


def _restricted_load(
    data: bytes,
    *,
    where: str,
    storage_bytes: Callable[[str, int], bytes] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Any:
    try:
        pickle_guard.scan(data)
        with arrays.file_budget():
            built = _RestrictedUnpickler(
                io.BytesIO(data), where=where, storage_bytes=storage_bytes
            ).load()
        pickle_guard.check_built(built, limits, pickle_bytes=len(data))
        return built
    except (UnsafePickleError, MemoryError):
        raise
    except pickle_guard.PickleTooBig as exc:
        raise over_limit(where, f"a pickle of {exc.what}", exc.name, exc.value) from exc
    except Exception as exc:  # pickle raises many types on corrupt input
        raise DamagedFileError(
            f"{where}: not a readable pickle ({type(exc).__name__}: {exc})"
        ) from exc


def load_pickled(path: Path, *, trust_pickle: bool = False, limits: Limits = DEFAULT_LIMITS) -> Any:
    """Return the object in a ``.pt`` zip archive or a bare pickle file; reading it,
    inflating it and building its objects take at most ``max_pickle_bytes`` of memory
    (:func:`analysis.formats.pickled.pickle_guard.memory_budget`), unless the pickle is trusted."""
    check_regular(path)
    if trust_pickle:
        return _load_pickled(path, trust_pickle=True, limits=limits)
    try:
        with pickle_guard.memory_budget(limits.max_pickle_bytes):
            return _load_pickled(path, trust_pickle=False, limits=limits)
    except MemoryError:
        what = f"a pickle that takes more than {limits.max_pickle_bytes:,} bytes to read"
        raise over_limit(path, what, "max_pickle_bytes", limits.max_pickle_bytes) from None


def _load_pickled(path: Path, *, trust_pickle: bool, limits: Limits) -> Any:
    raw = path.read_bytes()
    if raw.startswith(ZIP_MAGIC):
        if trust_pickle:
            return _torch_load(path)
        archive, member = _open_archive(path, raw, limits)
        prefix = member.filename[: -len("data.pkl")]
        with archive:
            try:
                payload = _read_member(archive, member)
            except MemoryError:
                raise
            except Exception as exc:  # zipfile raises many types on damaged archives
                raise DamagedFileError(f"{path}: damaged zip archive ({exc})") from exc
            return _restricted_load(
                payload,
                where=str(path),
                storage_bytes=lambda key, size: _member(archive, f"{prefix}data/{key}", size),
                limits=limits,
            )
    if trust_pickle:
        try:
            return pickle.loads(raw)
        except Exception as exc:
            raise DamagedFileError(f"{path}: not a readable pickle ({exc})") from exc
    return _restricted_load(raw, where=str(path), limits=limits)


def _open_archive(
    path: Path, raw: bytes, limits: Limits
) -> tuple[zipfile.ZipFile, zipfile.ZipInfo]:
    """A torch.save archive and its one ``data.pkl``, refused unread when it would
    inflate past ``max_inflation`` or when there are several (torch.load and this
    reader could then pick different ones: what was checked would not be what is read)."""
    listed = directory_bytes(raw[-(1 << 16) - 22 :])
    if listed is not None and listed > MAX_DIRECTORY_BYTES:
        raise DamagedFileError(
            f"{path}: a zip archive whose list of members takes {listed:,} bytes (more than "
            f"{MAX_DIRECTORY_BYTES:,}, some 100,000 members); a torch.save file has one member "
            "per tensor"
        )
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
        members = [info for info in archive.infolist() if info.filename.endswith("data.pkl")]
    except MemoryError:
        raise
    except Exception as exc:  # zipfile raises many types on damaged archives
        raise DamagedFileError(f"{path}: damaged zip archive ({exc})") from exc
    if not members:
        raise LogFormatError(f"{path}: a zip archive without data.pkl, not a torch.save file")
    for info in archive.infolist():
        method = unread_method(info)
        if method is not None:
            raise DamagedFileError(
                f"{path}: member {info.filename} is compressed with {method}, which "
                "torch.save never writes (it stores its members), refused unread as it "
                "could inflate to any size"
            )
    if len(members) > 1:
        names = ", ".join(info.filename for info in members[:3])
        raise DamagedFileError(
            f"{path}: a zip archive with {len(members)} data.pkl members ({names}); a "
            "torch.save file has one"
        )
    member = members[0]
    ratio = limits.max_inflation
    if member.file_size > INFLATION_FLOOR and member.file_size > ratio * member.compress_size:
        raise over_limit(
            path,
            f"{member.filename} inflates from {member.compress_size:,} to "
            f"{member.file_size:,} bytes",
            "max_inflation",
            ratio,
        )
    return archive, member


def _member(archive: zipfile.ZipFile, name: str, size: int) -> bytes:
    """An archive member of the size a tensor's storage declares, refused unread when its
    size says otherwise (a deflated member could inflate to any size)."""
    info = archive.getinfo(name)
    if info.file_size != size:
        raise arrays.ArrayError(f"{name} holds {info.file_size:,} bytes where {size:,} belong")
    return _read_member(archive, info)


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """A member's bytes, no more than the size it declares: zipfile's ``read()`` inflates a
    deflated member to its end whatever its header says (one declaring 100 bytes gave
    1 GB). Read with a size, it stops at the declared size and checks the CRC of what it
    read; a member that holds fewer bytes than it declares is damaged."""
    with archive.open(info) as member:
        data = member.read(info.file_size + 1)
    if len(data) != info.file_size:
        raise zipfile.BadZipFile(
            f"{info.filename} holds {len(data):,} bytes where it declares {info.file_size:,}"
        )
    return data


def _torch_load(path: Path) -> Any:
    try:
        import torch
    except ImportError as exc:
        raise UnsafePickleError(
            f"{path}: " + setting("trust_pickle", True) + " on a torch.save archive needs torch; "
            "install the 'torch' extra or drop " + setting("trust_pickle", True) + " to use the "
            "safe reader"
        ) from exc
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises RuntimeError and others on a damaged archive
        raise DamagedFileError(f"{path}: not a readable torch.save archive ({exc})") from exc


def dump_pt(obj: Any, path: Path, *, archive_name: str | None = None) -> None:
    """Write ``obj`` (plain values only) in torch.save's zip layout, without torch.

    torch.load reads the result; used to make sample data and test fixtures on machines
    without torch. The bytes depend only on ``obj`` and the archive name (fixed
    timestamps), so regenerated sample data does not change.
    """
    stem = archive_name or path.stem or "archive"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in (
            ("data.pkl", pickle.dumps(obj, protocol=2)),
            ("byteorder", b"little"),
            ("version", b"3\n"),
        ):
            archive.writestr(
                zipfile.ZipInfo(f"{stem}/{name}", date_time=(1980, 1, 1, 0, 0, 0)), data
            )
    path.write_bytes(buffer.getvalue())
