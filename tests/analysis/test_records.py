"""Finding each meaning of a record: the compiled finder against a plain walk of the paths."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.pickles import SKIPPED
from analysis.records import FieldMap, Found

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
    """SPEC §1 'first that exists wins', with null and SKIPPED counting as absent."""
    for path in candidates:
        value: Any = record
        for part in path.split("."):
            value = value.get(part) if type(value) is dict else None
        if value is not None and value is not SKIPPED:
            return value
    return None


def test_found_names_the_meanings_in_order() -> None:
    assert Found._fields == FieldMap.meanings()


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
