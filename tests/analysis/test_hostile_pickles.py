"""Pickles built to exhaust memory or time (issue 18): refused by the safe reader with a
one-line error naming the limit and the setting that raises it, in bounded memory."""

from __future__ import annotations

import contextlib
import pickle
import tracemalloc
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from analysis.errors import DamagedFileError, ReplayError, SkipReason, UnsafePickleError
from analysis.formats.pickled import pickles
from analysis.formats.pickled.pickles import load_pickled
from analysis.formats.slime_dumps.reader import dump_samples
from analysis.table.limits import LimitError, Limits
from tests import hostile


def _load(data: bytes, tmp_path: Path, name: str = "x.pkl", **limits: int) -> object:
    path = tmp_path / name
    path.write_bytes(data)
    return load_pickled(path, limits=Limits(**limits))


@pytest.mark.parametrize(
    ("data", "limit"),
    [
        (hostile.laughs(40), "max_pickle_reuse"),
        (hostile.memo_reuse(1 << 20, 100_000), "max_pickle_reuse"),
        (hostile.deep_lists(20_000), "max_depth"),
    ],
    ids=["billion-laughs", "memo-reuse", "deep"],
)
def test_pickle_bombs_are_refused_naming_the_limit(data: bytes, limit: str, tmp_path: Path) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(LimitError) as caught:
            _load(data, tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [name for name, _ in caught.value.settings] == [limit]
    assert peak < 3 * len(data) + (16 << 20)  # nothing expanded


def test_memo_references_count_against_the_bytes_of_the_pickle(tmp_path: Path) -> None:
    """Issue 34: one sample of 4,000 tokens repeated 8,000 times by memo reference (76 KB,
    128 million values, within max_pickle_values) made 8,000 rows of 4,000 spans and ran
    out of memory. A pickle holds at most max_pickle_reuse values a byte (past a million)."""
    data = hostile.memo_samples(tokens=4000, references=8000)
    assert len(data) < 100_000
    with pytest.raises(LimitError) as caught:
        _load(data, tmp_path, "0.pt")
    assert [name for name, _ in caught.value.settings] == ["max_pickle_reuse"]
    assert f"a pickle of {len(data):,} bytes holding more than" in str(caught.value)
    # The same values without memo reuse are read; raised, the limit lets the reuse through.
    few = hostile.memo_samples(tokens=4000, references=40)
    assert len(_load(few, tmp_path, "1.pt")["samples"]) == 40  # type: ignore[index]
    raised = _load(data, tmp_path, "0.pt", max_pickle_reuse=1 << 20)
    assert len(raised["samples"]) == 8000  # type: ignore[index]
    # max_pickle_values still holds when the reuse limit is raised past it.
    with pytest.raises(LimitError, match="max_pickle_values=1,000,000"):
        _load(data, tmp_path, "0.pt", max_pickle_reuse=1 << 20, max_pickle_values=10**6)


def test_a_raised_limit_lets_a_genuine_file_through(tmp_path: Path) -> None:
    data = hostile.laughs(10)  # 1,024 references to one string: fine
    assert _load(data, tmp_path) is not None
    with pytest.raises(LimitError, match="max_pickle_values=1,000"):
        _load(data, tmp_path, max_pickle_values=1000)
    nested = pickle.dumps([[[[1]]]])
    with pytest.raises(LimitError, match="max_depth"):
        _load(nested, tmp_path, max_depth=3)
    assert _load(nested, tmp_path, max_depth=4) == [[[[1]]]]


def test_a_huge_memo_index_is_refused_before_the_unpickler_allocates(tmp_path: Path) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(DamagedFileError, match="memo index of 100,000,000"):
            _load(hostile.huge_memo(10**8), tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_a_list_that_contains_itself_is_a_damaged_file(tmp_path: Path) -> None:
    with pytest.raises(DamagedFileError, match="contains itself"):
        _load(hostile.self_containing(), tmp_path)


def test_shared_values_are_read_once_not_copied_per_reference(tmp_path: Path) -> None:
    """A dict shared by every sample (memo reuse within the limit) stays one dict."""
    meta = {"parent_traj_id": "t", "dressage_end_token_version": "1"}
    samples = [{"group_index": i, "metadata": meta} for i in range(3)]
    path = tmp_path / "0.pt"
    path.write_bytes(pickle.dumps({"rollout_id": 0, "samples": samples}, protocol=2))
    _, read = dump_samples(path, trust_pickle=False)
    assert read[0]["metadata"] is read[2]["metadata"] == meta


def test_a_build_opcode_cannot_change_an_allowed_callable(tmp_path: Path) -> None:
    """BUILD sets attributes: on _codecs.encode it would set its defaults for every later
    file of the process."""
    state = b"}X\x0c\x00\x00\x00__defaults__X\x06\x00\x00\x00utf-32\x85s"
    data = hostile.PROTO + b"c_codecs\nencode\n" + state + b"b."
    with pytest.raises(DamagedFileError, match="BUILD"):
        _load(data, tmp_path)
    for target in (b"numpy\nndarray\n", b"numpy\ndtype\n"):
        with pytest.raises(DamagedFileError):
            _load(hostile.PROTO + b"c" + target + state + b"b.", tmp_path)
    assert _load(pickle.dumps(b"ab", protocol=2), tmp_path) == b"ab"


def test_encode_of_anything_but_text_is_refused(tmp_path: Path) -> None:
    """str() of a billion-laughs list would be gigabytes."""
    data = hostile.laughs(30).removesuffix(b".")
    data += b"0c_codecs\nencode\nj" + (30).to_bytes(4, "little") + b"X\x06\x00\x00\x00latin1\x86R."
    with pytest.raises(DamagedFileError, match="text"):
        _load(data, tmp_path)


def test_a_zip_member_that_inflates_past_the_limit_is_refused_unread(tmp_path: Path) -> None:
    data = hostile.deflated_pt(32 << 20)
    assert len(data) < 100_000
    with pytest.raises(LimitError, match="inflates from") as caught:
        _load(data, tmp_path, "bomb.pt")
    assert caught.value.settings == [("max_inflation", "200")]


def test_storages_no_tensor_uses_are_charged_to_the_file(tmp_path: Path) -> None:
    """Each storage is read whole when the pickle names it: three of the largest allowed
    were read (and ten deflated doubles were 1.3 GB from a 1.3 MB file)."""
    from analysis.formats.pickled import arrays

    path = tmp_path / "storages.pt"
    path.write_bytes(hostile.storages_pt(2, arrays.MAX_ARRAY_VALUES, "ByteStorage"))
    assert len(load_pickled(path)["samples"]) == 2
    path.write_bytes(hostile.storages_pt(3, arrays.MAX_ARRAY_VALUES, "ByteStorage"))
    with pytest.raises(DamagedFileError, match="storages hold more than 33,554,432 values"):
        load_pickled(path)


@pytest.mark.parametrize("member", ["data.pkl", "data/0"])
def test_a_zip_member_that_lies_about_its_size_is_not_inflated_past_it(
    tmp_path: Path, member: str
) -> None:
    """zipfile inflates a member to the end of its stream whatever its header says: one
    declaring 100 bytes took 2.2 GB for 1 GB of zeros."""
    data = hostile.lying_member_pt(64 << 20, member)
    assert len(data) < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(DamagedFileError, match=r"CRC|declares"):
            _load(data, tmp_path, "lying.pt")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


def test_an_archive_listing_a_hundred_thousand_members_is_refused_unlisted(
    tmp_path: Path,
) -> None:
    """zipfile makes an object per member of the list, 7.6 s a million, and the list was
    read twice (a 47 MB file of a million took 21 s); a torch.save file has one a tensor."""
    from analysis.errors import LogFormatError

    data = hostile.many_members_pt(20_000, 420)
    assert pickles.directory_bytes(data[-70_000:]) == 20_000 * (46 + 420) + 46 + 16
    path = tmp_path / "many.pt"
    path.write_bytes(data)
    with pytest.raises(DamagedFileError, match="list of members takes"):
        dump_samples(path, trust_pickle=False)
    path.write_bytes(hostile.many_members_pt(1_000, 420))  # 0.5 MB of list: read
    with pytest.raises(LogFormatError, match="expected"):  # read: a dict without samples
        dump_samples(path, trust_pickle=False)


def test_an_archive_with_two_data_pkl_is_refused(tmp_path: Path) -> None:
    """torch.load reads the one of its archive name: another could be what was checked."""
    path = tmp_path / "two.pt"
    pickles.dump_pt({"rollout_id": 0, "samples": []}, path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("other/data.pkl", pickle.dumps({"rollout_id": 1}, protocol=2))
    with pytest.raises(DamagedFileError, match=r"2 data\.pkl members"):
        load_pickled(path)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_link_to_a_device_is_refused_unread(tmp_path: Path) -> None:
    import analysis

    link = tmp_path / "x.pt"
    link.symlink_to("/dev/zero")
    with pytest.raises(ReplayError, match="not a regular file"):
        load_pickled(link)
    for name in ("x.jsonl", "x"):
        (tmp_path / name).symlink_to("/dev/urandom")
        with pytest.raises(analysis.InputNotFoundError, match="not a regular file"):
            analysis.load_logs([tmp_path / name])


# --------------------------------------------------------------------------- fuzzing

_OPCODES = [op.code.encode("latin-1") for op in __import__("pickletools").opcodes]
_ARGUMENTS = st.sampled_from(
    [b"", b"\x00", b"\x05", b"\xff", b"\x00\x00\x00\x00", b"\xff\xff\xff\x7f", b"\x10\x00\x00\x00",
     b"1\n", b"99999999\n", b"builtins\nset\n", b"_codecs\nencode\n", b"numpy\ndtype\n",
     b"torch\nFloatStorage\n", b"abc", b"\x02\x00\x00\x00hi"]
)  # fmt: skip


@st.composite
def opcode_streams(draw: st.DrawFn) -> bytes:
    """Random sequences of real opcodes with plausible and hostile arguments."""
    parts = [hostile.PROTO]
    for _ in range(draw(st.integers(1, 60))):
        parts.append(draw(st.sampled_from(_OPCODES)))
        parts.append(draw(_ARGUMENTS))
    if draw(st.booleans()):
        parts.append(b".")
    return b"".join(parts)


def _fuzz_one(data: bytes) -> None:
    tracemalloc.start()
    try:
        # the documented errors (exit 5); anything else fails the test
        with contextlib.suppress(DamagedFileError, UnsafePickleError):
            pickles._restricted_load(data, where="fuzz", limits=Limits(max_pickle_values=1 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


@settings(max_examples=80)
@given(opcode_streams())
def test_random_opcode_streams_end_in_a_documented_error(data: bytes) -> None:
    _fuzz_one(data)


@pytest.mark.slow
@settings(max_examples=3000)
@given(opcode_streams())
def test_random_opcode_streams_at_length(data: bytes) -> None:
    _fuzz_one(data)


# --------------------------------------------------------------------------- the count


def _reference_count(value: object) -> int:
    """What check_built counts, by plain recursion over the tree a DAG unfolds to."""
    if isinstance(value, dict):
        return 1 + sum(_reference_count(k) + _reference_count(v) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return 1 + sum(_reference_count(item) for item in value)
    if isinstance(value, (str, bytes, bytearray)):
        return 1 + len(value) // 8
    return 1


@st.composite
def shared_values(draw: st.DrawFn) -> object:
    """Values whose lists and dicts may be referenced many times (as memo reuse makes)."""
    pool: list[object] = []
    leaves = st.integers(-5, 10**6) | st.floats(allow_nan=False) | st.text(max_size=30) | st.none()
    for _ in range(draw(st.integers(1, 12))):
        parts: list[object] = []
        for _ in range(draw(st.integers(0, 4))):
            reuse = bool(pool) and draw(st.booleans())
            parts.append(draw(st.sampled_from(pool)) if reuse else draw(leaves))
        kind = draw(st.sampled_from(["list", "tuple", "dict"]))
        built: object = (
            parts if kind == "list" else tuple(parts) if kind == "tuple"
            else {f"k{i}": part for i, part in enumerate(parts)}
        )  # fmt: skip
        pool.append(built)
    return pool[-1]


@settings(max_examples=100)
@given(shared_values(), st.integers(1, 400))
def test_the_count_agrees_with_plain_recursion(value: object, budget: int) -> None:
    from analysis.formats.pickled import pickle_guard

    expected = _reference_count(value)
    if expected > budget:
        with pytest.raises(pickle_guard.PickleTooBig):
            pickle_guard.check_built(value, Limits(max_pickle_values=budget))
    else:
        pickle_guard.check_built(value, Limits(max_pickle_values=budget))


def test_numeric_keys_in_a_sample_are_named_not_an_internal_error(tmp_path: Path) -> None:
    """A pickled sample's keys may be numbers: the message listing the fields present
    joined them as text (TypeError, exit 1, also under on_bad_record='skip')."""
    import analysis

    sample = {1: 2, (3, 4): 5, "metadata": {"parent_traj_id": "t", 7: 8}}
    path = tmp_path / "0.pt"
    path.write_bytes(pickle.dumps({"rollout_id": 0, "samples": [sample]}, protocol=2))
    with pytest.raises(
        analysis.MissingFieldError,
        match=r"fields present: 1, \(3, 4\), metadata\.parent_traj_id, metadata\.7",
    ):
        analysis.load_logs([path])
    report = analysis.LoadReport()
    analysis.load_logs([path], on_bad_record="skip", report=report)
    assert report.skipped[SkipReason.MISSING_FIELD] == 1
