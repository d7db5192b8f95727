"""Hostile inputs of issue 34, run as the command line runs them and measured by
:mod:`tests.hostile` (peak resident memory and CPU time, which the host's load hardly
changes): each ends with a documented exit in bounded memory and time."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests import hostile
from tests.cli.test_hostile import _refused

READERS = [["inspect"], ["replay", "-k", "1", "-b", "1"], ["sweep", "-k", "1", "-m", "none"]]


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA], ids=["bzip2", "lzma"])
def test_a_member_compressed_as_torch_never_does_is_refused_unread(
    tmp_path: Path, method: int
) -> None:
    """2.6 KB of bzip2 inflating to 3 GiB: replay and sweep took 93-97 s and 6.1 GB,
    inspect and convert were killed past 120 s (zipfile inflates a bzip2 or lzma member a
    whole compressed chunk at a time, whatever size is asked for, and the rollout id was
    peeked at before any limit applied)."""
    path = tmp_path / "0.pt"
    path.write_bytes(hostile.compressed_pt(method))
    assert path.stat().st_size < 64 << 10
    name = "bzip2" if method == zipfile.ZIP_BZIP2 else "lzma"
    converted = ["convert", str(path), "-o", str(tmp_path / "c.parquet")]
    for args in [*([*words, str(path)] for words in READERS), converted]:
        run = hostile.run_bounded(*args)
        _refused(run, 5, f"{path}: member archive/data.pkl is compressed with {name}")
    assert not (tmp_path / "c.parquet").exists()


@pytest.mark.parametrize("suffix", ["pkl", "pt"])
def test_a_sample_repeated_by_memo_reference_is_refused(tmp_path: Path, suffix: str) -> None:
    """76 KB repeating one sample of 4,000 tokens 8,000 times (128 million values counted,
    within max_pickle_values): past 120 s and 2.8 GB, or an abort (exit 134) in inspect."""
    data = hostile.memo_samples(tokens=4000, references=8000)
    path = tmp_path / f"0.{suffix}"
    if suffix == "pt":
        import pickle

        from analysis.formats.pickled.pickles import dump_pt

        dump_pt(pickle.loads(data), path)
    else:
        path.write_bytes(data)
    for args in READERS:
        _refused(hostile.run_bounded(*args, str(path)), 5, "--limit max_pickle_reuse=")
    many = tmp_path / f"1.{suffix}"
    many.write_bytes(hostile.memo_samples(tokens=8, references=1_000_000))  # 10^6 references
    _refused(hostile.run_bounded("inspect", str(many)), 5, "--limit max_pickle_reuse=")
