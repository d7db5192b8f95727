"""Read slime rollout dumps (``torch.save`` files and bare pickles) without trusting them.

A ``.pt`` file written by ``torch.save`` is a zip archive holding ``<name>/data.pkl``.
The restricted unpickler below admits only plain containers and scalars; tensors
(and anything else from ``torch``) become :data:`SKIPPED` without importing torch, and
every other global is refused. Nothing from the file is ever executed on this path.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path
from typing import Any

from analysis.errors import DamagedFileError, LogFormatError, UnsafePickleError

ZIP_MAGIC = b"PK\x03\x04"

# Globals that only rebuild plain values; none can run code of the file's choosing.
_SAFE_GLOBALS: dict[tuple[str, str], Any] = {
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
    ("builtins", "bytearray"): bytearray,
    ("collections", "OrderedDict"): dict,
    ("_codecs", "encode"): lambda text, encoding="utf-8": str(text).encode(encoding),
}


class _Skipped:
    """Stands in for a tensor or other torch object: accepts any construction, holds nothing."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _Skipped:
        return SKIPPED

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __repr__(self) -> str:
        return "<skipped>"


SKIPPED: _Skipped = object.__new__(_Skipped)


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BufferedIOBase, *, where: str) -> None:
        super().__init__(file)
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS:
            return _SAFE_GLOBALS[(module, name)]
        if module == "torch" or module.startswith("torch."):
            return _Skipped
        raise UnsafePickleError(
            f"{self.where}: the pickle needs {module}.{name}, which the safe reader does not "
            "load; pass --trust-pickle if you trust this file (it may run code)"
        )

    def persistent_load(self, pid: Any) -> Any:
        # torch stores tensor data out of band; the field is skipped, so the bytes never matter.
        return SKIPPED


def _restricted_load(data: bytes, *, where: str) -> Any:
    try:
        return _RestrictedUnpickler(io.BytesIO(data), where=where).load()
    except UnsafePickleError:
        raise
    except Exception as exc:  # pickle raises many types on corrupt input
        raise DamagedFileError(
            f"{where}: not a readable pickle ({type(exc).__name__}: {exc})"
        ) from exc


def load_pickled(path: Path, *, trust_pickle: bool = False) -> Any:
    """Return the object in a ``.pt`` zip archive or a bare pickle file."""
    raw = path.read_bytes()
    if raw.startswith(ZIP_MAGIC):
        if trust_pickle:
            return _torch_load(path)
        try:
            with zipfile.ZipFile(io.BytesIO(raw)) as archive:
                names = [n for n in archive.namelist() if n.endswith("data.pkl")]
                if not names:
                    raise LogFormatError(
                        f"{path}: a zip archive without data.pkl, not a torch.save file"
                    )
                payload = archive.read(min(names, key=len))
        except LogFormatError:
            raise
        except Exception as exc:  # zipfile raises many types on damaged archives
            raise DamagedFileError(f"{path}: damaged zip archive ({exc})") from exc
        return _restricted_load(payload, where=str(path))
    if trust_pickle:
        try:
            return pickle.loads(raw)
        except Exception as exc:
            raise DamagedFileError(f"{path}: not a readable pickle ({exc})") from exc
    return _restricted_load(raw, where=str(path))


def _torch_load(path: Path) -> Any:
    try:
        import torch
    except ImportError as exc:
        raise UnsafePickleError(
            f"{path}: --trust-pickle on a torch.save archive needs torch; "
            "install the 'torch' extra or drop --trust-pickle to use the safe reader"
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
