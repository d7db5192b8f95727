"""NumPy arrays and torch tensors in dumps, read by the safe reader as plain lists: the same
values as NumPy itself gives, and a refusal (not a crash, not code run) for anything else."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from analysis.errors import DamagedFileError, UnsafePickleError
from analysis.io import arrays
from analysis.io.dumps import dump_samples
from analysis.io.pickles import load_pickled


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
        _read(np.ma.masked_array([1, 2], mask=[0, 1]), tmp_path)
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
