"""One vocabulary for a control turned off: `off` and `none` for K and M alike (K = 0 too)."""

from __future__ import annotations

import pytest

import analysis
from analysis.engine import parse_one_keep_versions, parse_one_max_preempts


@pytest.mark.parametrize("word", ["off", "none", "OFF", " None "])
def test_off_and_none_turn_either_control_off(word: str) -> None:
    assert parse_one_keep_versions(word) == 0
    assert parse_one_max_preempts(word) is None
    assert analysis.parse_keep_versions(f"{word},1..2") == [0, 1, 2]
    assert analysis.parse_max_preempts(f"{word},1") == [None, 1]


def test_other_words_are_refused_in_the_settings_words() -> None:
    with pytest.raises(analysis.SettingSyntaxError, match="expected a whole number or off"):
        parse_one_keep_versions("never")
    with pytest.raises(analysis.SettingSyntaxError, match="lists of K values are for sweep"):
        parse_one_keep_versions("1,2")
    with pytest.raises(analysis.SettingSyntaxError, match="max_preempts: expected"):
        parse_one_max_preempts("lots")
    with pytest.raises(analysis.SettingSyntaxError, match=r"ranges like 0\.\.6 or off"):
        analysis.parse_keep_versions("1,x")
