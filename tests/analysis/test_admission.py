"""Admission bounds of other systems on a log (analysis.rules.admission) against the plain
reference model (tests/reference_admission.py) on hypothesis-generated logs: every
group's verdict and excess agree; where batches are full and consumed in order, the lag
form agrees with each system's own capacity formula."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

from analysis.errors import ConfigError, SettingSyntaxError
from analysis.rules.admission import (
    AdmissionRule,
    admission_violations,
    default_step_offset,
    parse_admission,
)
from analysis.table.schema import polars_schema
from tests import reference_admission as ref

LABELS = ("-1", "0", "1", "2", "3", "5", "8", " 2 ", "03", "unknown", "v1", "")


def table_of(log: list[dict[str, Any]]) -> pl.DataFrame:
    """The canonical columns the admission check reads, for a generated log."""
    spans = [
        None if record["labels"] is None
        else [{"start": i, "end": i + 1, "version": label}
              for i, label in enumerate(record["labels"])]
        for record in log
    ]  # fmt: skip
    schema = polars_schema()
    return pl.DataFrame(
        {
            "group_id": [record["group_id"] for record in log],
            "version_spans": spans,
            "trainer_step": [record["trainer_step"] for record in log],
        },
        schema={name: schema[name] for name in ("group_id", "version_spans", "trainer_step")},
    )


records = st.fixed_dictionaries(
    {
        "group_id": st.sampled_from([f"g{i}" for i in range(8)]),
        "labels": st.none() | st.lists(st.sampled_from(LABELS), min_size=0, max_size=3),
        "trainer_step": st.none() | st.integers(0, 9),
    }
)
logs = st.lists(records, min_size=0, max_size=25)
known_records = st.fixed_dictionaries(
    {
        "group_id": st.sampled_from([f"g{i}" for i in range(10)]),
        "labels": st.lists(st.sampled_from(("0", "1", "2", "3")), min_size=1, max_size=2),
        "trainer_step": st.integers(0, 5),
    }
)
"""Records whose groups are all checked (an integer start and a step), so that groups
carried over a weight update are common."""


def verdicts(table: pl.DataFrame, rule: AdmissionRule) -> dict[str, Any]:
    report = admission_violations(table, rule)
    found: dict[str, Any] = {}
    for row in report.groups.iter_rows(named=True):
        found[row["group_id"]] = (
            None if row["violates"] is None else (row["violates"], int(row["over"]))
        )
    return found


def _check_lag_rules(log: list[dict[str, Any]], bound: int, offset: int) -> None:
    table = table_of(log)
    expected = ref.lag_rule(log, bound, offset)
    for spec in (
        f"areal:eta={bound}",
        f"skyrl:max_staleness_steps={bound}",
        f"nemo-gated:max_staleness_versions={bound}",
    ):
        rule = parse_admission(f"{spec},step_offset={offset}")
        assert verdicts(table, rule) == expected, spec


def _check_verl(log: list[dict[str, Any]], required: int, threshold: float, offset: int) -> None:
    rule = parse_admission(
        f"verl-async:staleness_threshold={threshold},required_samples={required},"
        f"step_offset={offset}"
    )
    expected = ref.verl_async(log, rule.max_required, offset)
    assert verdicts(table_of(log), rule) == expected


@given(log=logs, bound=st.integers(0, 3), offset=st.integers(0, 2))
def test_lag_rules_agree_with_the_reference(
    log: list[dict[str, Any]], bound: int, offset: int
) -> None:
    _check_lag_rules(log, bound, offset)


@settings(max_examples=300)
@given(log=logs | st.lists(known_records, max_size=25), required=st.integers(1, 4),
       threshold=st.sampled_from([0, 0.5, 1]), offset=st.integers(0, 2))  # fmt: skip
def test_verl_async_agrees_with_the_reference(
    log: list[dict[str, Any]], required: int, threshold: float, offset: int
) -> None:
    _check_verl(log, required, threshold, offset)


@pytest.mark.slow
@settings(max_examples=1500)
@given(log=st.lists(records, min_size=0, max_size=80), bound=st.integers(0, 4),
       offset=st.integers(0, 2), required=st.integers(1, 6),
       threshold=st.sampled_from([0, 0.25, 0.5, 1, 2]))  # fmt: skip
def test_every_rule_agrees_with_the_reference_at_full_size(
    log: list[dict[str, Any]], bound: int, offset: int, required: int, threshold: float
) -> None:
    _check_lag_rules(log, bound, offset)
    _check_verl(log, required, threshold, offset)


@st.composite
def full_batches(draw: st.DrawFn) -> tuple[int, list[int]]:
    """Groups consumed in order in full batches of B: group n is trained at step n // B
    (version n // B); each started at a version no later than that."""
    batch = draw(st.integers(1, 4))
    steps = draw(st.integers(1, 6))
    starts = [draw(st.integers(0, n // batch)) for n in range(batch * steps)]
    return batch, starts


@given(full=full_batches(), bound=st.integers(0, 3))
def test_the_lag_form_is_each_systems_own_capacity_rule(
    full: tuple[int, list[int]], bound: int
) -> None:
    """docs/semantics.md: with full batches consumed in order, AReaL's, SkyRL's and
    NeMo-RL's gated capacity formulas each come down to trained - start <= bound."""
    batch, starts = full
    log = [
        {"group_id": f"g{n}", "labels": [str(start)], "trainer_step": n // batch}
        for n, start in enumerate(starts)
    ]
    table = table_of(log)
    for spec, own in (
        (f"areal:eta={bound}", ref.areal_capacity),
        (f"skyrl:max_staleness_steps={bound}", ref.skyrl_capacity),
        (f"nemo-gated:max_staleness_versions={bound}", ref.nemo_gated),
    ):
        found = verdicts(table, parse_admission(f"{spec},step_offset=0"))
        assert [found[f"g{n}"] for n in range(len(starts))] == own(starts, batch, bound), spec


def test_a_prime_rl_log_trains_version_step_minus_one() -> None:
    assert default_step_offset(["prime-rl"]) == 1
    assert default_step_offset(["jsonl"]) == default_step_offset([]) == 0
    log = [{"group_id": "g", "labels": ["0"], "trainer_step": 2}]
    report = admission_violations(
        table_of(log), parse_admission("areal:eta=0"), formats=("prime-rl",)
    )
    assert report.step_offset == 1 and report.violations == 1
    assert report.to_dict()["max_over"] == 1


def test_verl_counts_the_groups_still_running_at_a_weight_update() -> None:
    """max_required 2: the third group started at version 0 is one too many; two of the
    three are still running when the weights move to 1 (trained at 2), so the first group
    started at 1 is the third of that window."""
    log = [
        {"group_id": "old-a", "labels": ["0"], "trainer_step": 2},
        {"group_id": "old-b", "labels": ["0"], "trainer_step": 2},
        {"group_id": "done", "labels": ["0"], "trainer_step": 0},
        {"group_id": "new", "labels": ["1"], "trainer_step": 2},
    ]
    rule = parse_admission("verl-async:staleness_threshold=0,required_samples=2,step_offset=0")
    report = admission_violations(table_of(log), rule)
    assert report.to_dict()["violating_groups"] == ["done", "new"]
    measure = dict(zip(report.groups["group_id"], report.groups["measure"], strict=True))
    assert measure == {"old-a": 1, "old-b": 2, "done": 3, "new": 3}


def test_groups_without_start_or_step_are_counted_as_unknown() -> None:
    log: list[dict[str, Any]] = [
        {"group_id": "a", "labels": ["-1"], "trainer_step": 3},  # prompt-only: no start
        {"group_id": "b", "labels": ["1"], "trainer_step": None},  # no step
        {"group_id": "c", "labels": ["-1", "1"], "trainer_step": 4},  # first real label
    ]
    report = admission_violations(table_of(log), parse_admission("skyrl:max_staleness_steps=1"))
    summary = report.to_dict()
    assert (summary["checked"], summary["unknown"], summary["violations"]) == (1, 2, 1)
    assert summary["violating_groups"] == ["c"] and summary["max_over"] == 2


@pytest.mark.parametrize(
    ("spec", "error", "words"),
    [
        ("tinker:k=1", SettingSyntaxError, "unknown rule 'tinker'; write one of areal:"),
        (
            "tinker:k=1",
            SettingSyntaxError,
            "staleness_threshold=X,required_samples=R \\(inspect "
            "needs R; simulate defaults it to the batch size\\)",
        ),
        (
            "prime-rl:max_off_policy_steps=1",
            SettingSyntaxError,
            "it is a staleness policy, replayed as policy=prime-rl:KNOB=VALUE",
        ),
        ("areal:", SettingSyntaxError, "give max_head_offpolicyness=N"),
        ("areal:eta=1.5", SettingSyntaxError, "must be a whole number"),
        ("areal:k=1", SettingSyntaxError, "'k=1' is not one of areal's knobs"),
        ("skyrl:max_staleness_steps=-1", ConfigError, "must not be negative"),
        ("verl-async:staleness_threshold=0.5", SettingSyntaxError, "give required_samples=N"),
        ("verl-async:staleness_threshold=0,required_samples=0", ConfigError, "allows no group"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec: str, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words) as raised:
        parse_admission(spec)
    assert str(raised.value).startswith(f"admission={spec}: ")


def test_specs_read_back() -> None:
    rule = parse_admission(" VERL-async : staleness_threshold=0.5, required_samples=4, "
                           "trigger_parameter_sync_step=2")  # fmt: skip
    assert rule.max_required == int(4 * 1.5 * 2)
    assert parse_admission(rule.spec) == rule
