"""Finding each meaning of a record: the compiled finder against a plain walk of the paths."""

from __future__ import annotations

import pickle
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from analysis.formats.fields import canonical_row
from analysis.table.fieldmap import SKIPPED, FieldMap, Found

KEYS = ["a", "b", "metadata", "index", "x.y"]

values = st.recursive(
    st.none() | st.integers() | st.text(max_size=2) | st.just(SKIPPED) | st.just([1, 2]),
    lambda inner: st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    max_leaves=12,
)
records = st.dictionaries(st.sampled_from(KEYS), values, max_size=5)
paths = st.lists(st.sampled_from(KEYS), min_size=1, max_size=3).map(".".join)
field_maps = st.fixed_dictionaries(
    {name: st.lists(paths, max_size=3).map(tuple) for name in FieldMap.meanings()}
).map(lambda chosen: FieldMap(**chosen))


def first_of(record: dict[str, Any], candidates: tuple[str, ...]) -> Any:
    """docs/semantics.md §1 'first that exists wins', with null and SKIPPED counting as absent."""
    for path in candidates:
        value: Any = record
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None and value is not SKIPPED:
            return value
    return None


def test_found_names_the_meanings_in_order() -> None:
    assert Found._fields == FieldMap.meanings()


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(records, field_maps)
def test_find_agrees_with_a_plain_walk_of_the_paths(
    record: dict[str, Any], fields: FieldMap
) -> None:
    expected = [first_of(record, getattr(fields, name)) for name in FieldMap.meanings()]
    assert list(fields.find(record)) == expected


@given(records)
def test_the_default_map_finds_dressage_keys_under_metadata_first(record: dict[str, Any]) -> None:
    fields = FieldMap()
    record = {**record, "trajectory_id": "top", "metadata": {"parent_traj_id": "nested"}}
    assert fields.find(record).trajectory == "nested"
    record["metadata"] = ["not", "a", "dict"]
    assert fields.find(record).trajectory == "top"
    assert list(fields.find(record)) == [
        first_of(record, getattr(fields, name)) for name in FieldMap.meanings()
    ]


def test_paths_are_data_not_code() -> None:
    """A path is looked up as a key, whatever it says."""
    evil = "')\n__import__('sys', key[0])  # \\"  # no dot: one key
    fields = FieldMap().override(group=evil)
    assert fields.find({evil: 7}).group == 7
    assert fields.find({"group_index": 1}).group is None


def test_dict_subclasses_are_dicts_at_every_level() -> None:
    """An OrderedDict record (from a library caller, say) reads like a plain one."""
    plain = {"group_index": 3, "metadata": {"parent_traj_id": "t", "segment_index": 2}}
    ordered = OrderedDict(group_index=3, metadata=OrderedDict(parent_traj_id="t", segment_index=2))
    fields = FieldMap()
    assert fields.find(ordered) == fields.find(plain)
    assert fields.find(plain).segment == 2
    assert canonical_row(ordered, fields=fields, where="x", extra=["metadata.segment_index"]) == (
        canonical_row(plain, fields=fields, where="x", extra=["metadata.segment_index"])
    )


def test_a_used_field_map_can_be_pickled() -> None:
    fields = FieldMap().override(group="metadata.g")
    assert fields.find({"metadata": {"g": 1}}).group == 1
    again = pickle.loads(pickle.dumps(fields))
    assert again == fields
    assert again.find({"metadata": {"g": 2}}).group == 2


def test_many_paths_and_deep_paths() -> None:
    many = tuple(f"k{n}" for n in range(300))
    deep = ".".join(["d"] * 2000)
    fields = FieldMap(group=many, trajectory=(deep,))
    assert fields.find({"k299": "last"}).group == "last"
    record: dict[str, Any] = {"d": "leaf"}
    for _ in range(1999):
        record = {"d": record}
    assert fields.find(record).trajectory == "leaf"
