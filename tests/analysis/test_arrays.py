"""NumPy arrays and torch tensors in dumps, read by the safe reader as plain lists: the same
values as NumPy itself gives, and a refusal (not a crash, not code run) for anything else."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from analysis.errors import DamagedFileError, UnsafePickleError
from analysis.formats.pickled import arrays
from analysis.formats.pickled.pickles import load_pickled
from analysis.formats.slime_dumps.reader import dump_samples


def _read(obj: object, tmp_path: Path, protocol: int = 2) -> object:
    path = tmp_path / "x.pkl"
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    return load_pickled(path)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=np.int32).reshape(2, 3),
        np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
        np.array([0.5, -1.25, 3.0], dtype=">f8"),
        np.array([[True, False]], dtype=bool),
        np.arange(4, dtype=np.uint8).reshape(2, 2, 1),
        np.zeros((0, 3), dtype=np.float32),
    ],
    ids=["int32", "fortran", "big-endian", "bool", "3-d", "empty"],
)
@pytest.mark.parametrize("protocol", [2, 4])
def test_numpy_arrays_read_as_numpy_lists_them(
    array: np.ndarray, protocol: int, tmp_path: Path
) -> None:
    rebuilt = _read({"rollout_routed_experts": array}, tmp_path, protocol)
    assert isinstance(rebuilt, dict)
    assert rebuilt["rollout_routed_experts"].tolist() == array.tolist()


def test_numpy_scalars_read_as_numbers(tmp_path: Path) -> None:
    rebuilt = _read({"reward": np.float64(0.25), "steps": np.int64(7)}, tmp_path)
    assert rebuilt == {"reward": 0.25, "steps": 7}


def test_a_dump_holding_a_numpy_array_reads_without_trust(tmp_path: Path) -> None:
    """A routing-replay dump (Dressage's rollout_routed_experts) used to need --trust-pickle."""
    sample = {
        "group_index": 0,
        "metadata": {"parent_traj_id": "t0", "dressage_end_token_version": "1"},
        "rollout_routed_experts": np.arange(8, dtype=np.int32).reshape(2, 2, 2),
    }
    path = tmp_path / "0.pt"
    path.write_bytes(pickle.dumps({"rollout_id": 0, "samples": [sample]}, protocol=2))
    _, samples = dump_samples(path, trust_pickle=False)
    assert samples[0]["rollout_routed_experts"] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]


def test_object_arrays_and_subclasses_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DamagedFileError, match="not a plain number"):
        _read(np.array([1, "a"], dtype=object), tmp_path)
    with pytest.raises(UnsafePickleError, match=r"numpy\.ma"):
        _read(np.ma.masked_array([1, 2], mask=[False, True]), tmp_path)
    with pytest.raises(DamagedFileError, match=r"V8. is not a plain number"):
        _read(np.zeros(2, dtype=[("a", "i4"), ("b", "f4")]), tmp_path)


def test_sizes_that_disagree_with_the_bytes_are_refused() -> None:
    dtype = arrays.NumpyDtype("<i4")
    array = arrays.numpy_reconstruct(arrays.NumpyArrayType, (0,), b"b")
    with pytest.raises(arrays.ArrayError, match="bytes"):
        array.__setstate__((1, (3,), dtype, False, b"\x00" * 8))
    with pytest.raises(arrays.ArrayError, match="more than"):
        array.__setstate__((1, (1 << 20, 1 << 20), dtype, False, b""))
    with pytest.raises(arrays.ArrayError, match="subclass"):
        arrays.numpy_reconstruct(object, (0,), b"b")


def test_tensor_views_are_bounded_by_their_storage() -> None:
    kind = arrays.TorchStorageType("IntStorage")
    storage = arrays.TorchStorage(kind, b"\x01\x00\x00\x00" * 6, 6)
    assert arrays.TorchTensor(storage, 0, (2, 3), (3, 1)).tolist() == [[1] * 3] * 2
    assert arrays.TorchTensor(storage, 2, (2,), (2,)).tolist() == [1, 1]
    with pytest.raises(arrays.ArrayError, match="past its storage"):
        arrays.TorchTensor(storage, 4, (2, 2), (2, 1))
    with pytest.raises(arrays.ArrayError, match="bytes"):
        arrays.TorchStorage(kind, b"\x00" * 5, 6)


# --------------------------------------------------------------------------- hostile files

import io  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
import zipfile  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402


@contextmanager
def _fake_torch() -> Iterator[tuple[type, object]]:
    """Stand-ins named torch.FloatStorage and torch._utils._rebuild_tensor_v2, so a test
    can write torch.save-shaped pickles (what a hostile file could hold) without torch."""
    torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")

    class FloatStorage:
        pass

    def _rebuild_tensor_v2(*args: object) -> None:
        pass

    FloatStorage.__module__, _rebuild_tensor_v2.__module__ = "torch", "torch._utils"
    FloatStorage.__qualname__, _rebuild_tensor_v2.__qualname__ = (
        "FloatStorage",
        "_rebuild_tensor_v2",
    )
    torch.FloatStorage, utils._rebuild_tensor_v2 = FloatStorage, _rebuild_tensor_v2  # type: ignore[attr-defined]
    saved = {name: sys.modules.get(name) for name in ("torch", "torch._utils")}
    sys.modules.update({"torch": torch, "torch._utils": utils})
    try:
        yield FloatStorage, _rebuild_tensor_v2
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _torch_file(
    path: Path,
    tensors: list[tuple[int, tuple[int, ...], tuple[int, ...]]],
    numel: int,
    stored: bytes | None = None,
) -> Path:
    """A .pt archive of tensors (offset, size, stride) over one float storage of ``numel``."""
    with _fake_torch() as (storage_type, rebuild):

        class Tensor:
            def __init__(self, offset: int, size: tuple[int, ...], stride: tuple[int, ...]):
                self.args = (offset, size, stride)

            def __reduce__(self) -> tuple[Any, ...]:
                return rebuild, (STORAGE, *self.args, False, {})

        class Pickler(pickle.Pickler):
            def persistent_id(self, obj: object) -> object:
                return ("storage", storage_type, "0", "cpu", numel) if obj is STORAGE else None

        STORAGE = object()
        buffer = io.BytesIO()
        Pickler(buffer, protocol=2).dump({"samples": [{"t": [Tensor(*t) for t in tensors]}]})
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x/data.pkl", buffer.getvalue())
        archive.writestr("x/data/0", stored if stored is not None else b"\x00" * 4 * numel)
    return path


def test_a_real_tensor_reads_as_its_values(tmp_path: Path) -> None:
    path = _torch_file(tmp_path / "ok.pt", [(0, (2, 2), (2, 1)), (1, (2,), (0,))], 4)
    assert load_pickled(path)["samples"][0]["t"][0].tolist() == [[0.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize(
    ("tensors", "numel", "problem"),
    [
        ([(0, (10**8, 0), (1, 1))], 1, "more than"),  # no values, 10^8 empty lists
        ([(0, (1 << 23,), (0,))] * 5, 1, "file's arrays"),  # one value, viewed 5 x 8M times
        ([(0, (1,) * 200, (1,) * 200)], 1, "not a list of sizes"),  # 200 dimensions
        ([(0, (1,), (1,))], 1 << 30, "values"),  # a storage declared huge
    ],
    ids=["zero-size dimension", "storage reused", "deep shape", "huge storage"],
)
def test_crafted_tensors_are_refused_before_they_take_memory(
    tensors: list[tuple[int, tuple[int, ...], tuple[int, ...]]],
    numel: int,
    problem: str,
    tmp_path: Path,
) -> None:
    stored = b"\x00" * 4 if numel > 1 << 24 else None
    path = _torch_file(tmp_path / "bad.pt", tensors, numel, stored)
    with pytest.raises(DamagedFileError, match=problem):
        load_pickled(path)


def test_a_storage_member_of_another_size_is_not_read(tmp_path: Path) -> None:
    path = _torch_file(tmp_path / "bad.pt", [(0, (4,), (1,))], 4, stored=b"\x00" * 64)
    with pytest.raises(DamagedFileError, match="bytes where"):
        load_pickled(path)


@pytest.mark.parametrize("call", [bytearray, bytes], ids=["bytearray", "bytes"])
def test_byte_strings_of_a_given_length_are_refused(call: type, tmp_path: Path) -> None:
    class Big:
        def __reduce__(self) -> tuple[Any, ...]:
            return call, (3 * 10**9,)

    path = tmp_path / "big.pkl"
    path.write_bytes(pickle.dumps(Big(), protocol=2))
    with pytest.raises(DamagedFileError):
        load_pickled(path)


def test_a_sample_nested_too_deeply_is_a_damaged_file(tmp_path: Path) -> None:
    deep: dict[str, Any] = {}
    for _ in range(5_000):
        deep = {"x": deep}
    path = tmp_path / "0.pt"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # for pickle.dumps only: the reader runs at the default
    try:
        path.write_bytes(pickle.dumps({"rollout_id": 0, "samples": [deep]}, protocol=4))
    finally:
        sys.setrecursionlimit(limit)
    with pytest.raises(DamagedFileError, match="nested too deeply"):
        dump_samples(path, trust_pickle=False)
