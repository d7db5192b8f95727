"""The other systems' rules (docs/semantics.md §13) against their reference models, and one
test per modelling choice the section documents.

Each differential example writes a hypothesis-generated raw log to JSONL, loads it, and
replays a policy; every decision (and every summary figure the reference computes) must
agree with ``tests.reference_policies``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import analysis
from analysis.errors import ConfigError, SettingSyntaxError
from analysis.rules.policies import (
    DressagePolicy,
    NemoWindowedPolicy,
    PrimeRLPolicy,
    VerlDropPolicy,
    parse_policy,
    replay_policy,
    sweep_policies,
)
from tests.analysis.test_differential import expected_summary, project, write_jsonl
from tests.reference import replay_reference
from tests.reference_policies import (
    _Log,
    nemo_windowed_reference,
    prime_rl_reference,
    start_indices,
    start_labels,
    token_weighted_reference,
    verl_drop_reference,
)
from tests.strategies import NUMBER_LABELS, REAL_LABELS, raw_logs

DECISION_COLUMNS = ["group_id", "decision", "stage", "batch", "version_index", "version_gap"]

peer_settings = st.tuples(
    st.sampled_from(("prime-rl", "verl-drop", "nemo-fifo", "nemo-freshest")),
    st.integers(0, 3),  # the knob (verl's threshold is this + 1)
    st.integers(1, 5),  # batch_groups
    st.sampled_from(("own", "steps", "logged", "versions")),
    st.booleans(),  # read as prime-rl's own log (formats=("prime-rl",): step N trains N - 1)
)
Setting = tuple[str, int, int, str, bool]


@st.composite
def peer_logs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Raw logs whose labels are numbers (most of them: lags in numbers), any labels, or
    numbers and one label that is not; each record mostly with the trainer step it came
    back at (``dressage_return_rollout_id``, for the logged clock), in any order."""
    pool = draw(
        st.sampled_from((NUMBER_LABELS, NUMBER_LABELS, REAL_LABELS, (*NUMBER_LABELS, "03")))
    )
    records = draw(raw_logs(real_labels=pool))
    every = draw(st.integers(0, 4)) > 0
    step = draw(st.integers(0, 3))
    for record in records:
        step += draw(st.sampled_from((0, 0, 1, 2, -1)))
        if every or draw(st.booleans()):
            record["metadata"]["dressage_return_rollout_id"] = max(0, step)
    return records


def peer(kind: str, knob: int, clock: str, own_log: bool) -> tuple[Any, Any]:
    """The policy object and its reference model (a function of records and B)."""
    args: dict[str, Any] = {"clock": clock, "own_log": own_log, "step_offset": int(own_log)}
    if kind == "prime-rl":
        return PrimeRLPolicy(
            max_off_policy_steps=knob, clock=clock
        ), lambda r, b: prime_rl_reference(r, max_off_policy_steps=knob, batch_groups=b, **args)
    # verl's and NeMo-RL's own steps are in no log read here: own is steps.
    args["own_log"] = False
    if kind == "verl-drop":
        return VerlDropPolicy(
            max_off_policy_threshold=knob + 1, clock=clock
        ), lambda r, b: verl_drop_reference(
            r, max_off_policy_threshold=knob + 1, batch_groups=b, **args
        )
    order = kind.removeprefix("nemo-")
    return NemoWindowedPolicy(
        max_staleness_versions=knob, order=order, clock=clock
    ), lambda r, b: nemo_windowed_reference(
        r, max_staleness_versions=knob, batch_groups=b, order=order, **args
    )


def check_agrees(records: list[dict[str, Any]], table: Any, setting: Setting) -> None:
    kind, knob, batch_groups, clock, own_log = setting
    policy, reference = peer(kind, knob, clock, own_log)
    formats = ("prime-rl",) if own_log else ()
    if clock == "logged" and not logged_clock_readable(records):
        with pytest.raises(ConfigError, match="clock=logged reads each group's trainer step"):
            replay_policy(table, policy, batch_groups=batch_groups, formats=formats)
        return
    expected = reference(records, batch_groups)
    result = replay_policy(table, policy, batch_groups=batch_groups, formats=formats)
    assert result.decisions.select(DECISION_COLUMNS).to_dicts() == expected.decisions
    summary = result.to_dict()
    assert project(summary, expected.summary) == expected_summary(expected.summary)
    assert summary["policy"]["name"] == policy.name
    assert summary["policy"]["clock"] == reference_clock(records, clock, own_log and kind)
    assert result.decisions["start_version_index"].to_list() == start_indices(records)
    assert result.decisions["start_version"].to_list() == start_labels(records)
    weighted = token_weighted_reference(records, expected.decisions)
    assert summary["token_weighted"] == expected_summary(weighted)


def logged_clock_readable(records: list[dict[str, Any]]) -> bool:
    """Whether every group carries a trainer step and every version is a number."""
    log = _Log(records)
    return log.numbered and all(step is not None for step in log.steps)


def reference_clock(records: list[dict[str, Any]], clock: str, own_log: str | bool) -> str:
    return _Log(records, clock=clock, own_log=own_log == "prime-rl").clock


@pytest.mark.slow
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(records=peer_logs(), settings_=st.lists(peer_settings, min_size=1, max_size=4))
def test_peer_rules_agree_with_reference(
    tmp_path: Path, records: list[dict[str, Any]], settings_: list[Setting]
) -> None:
    table = analysis.load_logs([write_jsonl(records, tmp_path / "log.jsonl")])
    for setting in settings_:
        check_agrees(records, table, setting)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(records=peer_logs(), setting=peer_settings)
def test_peer_rules_agree_with_reference_small(
    tmp_path: Path, records: list[dict[str, Any]], setting: Setting
) -> None:
    table = analysis.load_logs([write_jsonl(records, tmp_path / "log.jsonl")])
    check_agrees(records, table, setting)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    records=raw_logs(),
    keep_versions=st.integers(0, 3),
    max_preempts=st.none() | st.integers(0, 2),
    batch_groups=st.integers(1, 5),
)
def test_dressage_policy_is_the_engine_and_token_weights_agree(
    tmp_path: Path,
    records: list[dict[str, Any]],
    keep_versions: int,
    max_preempts: int | None,
    batch_groups: int,
) -> None:
    """The Dressage policy is the engine unchanged; its token-weighted figures (§10.6)
    agree with the reference's."""
    table = analysis.load_logs([write_jsonl(records, tmp_path / "log.jsonl")])
    config = analysis.ReplayConfig(
        keep_versions=keep_versions, max_preempts=max_preempts, batch_groups=batch_groups
    )
    engine = analysis.replay(table, config)
    policy = replay_policy(
        table, DressagePolicy(keep_versions, max_preempts), batch_groups=batch_groups
    )
    assert policy.decisions.equals(engine.decisions)
    assert policy.to_dict() == {"policy": policy.policy.to_dict(), **engine.summary.to_dict()}
    expected = replay_reference(
        records, keep_versions=keep_versions, max_preempts=max_preempts, batch_groups=batch_groups
    )
    weighted = token_weighted_reference(records, expected.decisions, max_preempts=max_preempts)
    assert engine.summary.token_weighted == expected_summary(weighted)


# ------------------------------------------------------------- modelling choices (§13)


def _log(*groups: tuple[str | None, list[Any] | None, int], aborted: tuple[int, ...] = ()) -> Any:
    """Groups of one trajectory: (end version, token versions or None, response tokens);
    the groups numbered in ``aborted`` have an aborted record (failed, §9)."""
    return analysis.records_to_table(_records(*groups, aborted=aborted))


def _records(
    *groups: tuple[str | None, list[Any] | None, int], aborted: tuple[int, ...] = ()
) -> list[dict[str, Any]]:
    """The raw records of :func:`_log`."""
    records = []
    for number, (end, tokens, length) in enumerate(groups):
        metadata: dict[str, Any] = {"parent_traj_id": "t", "dressage_end_token_version": end}
        if tokens is not None:
            metadata["full_versions"] = tokens
        status = "aborted" if number in aborted else "completed"
        records.append(
            {
                "group_index": number,
                "response_length": length,
                "status": status,
                "metadata": metadata,
            }
        )
    return records


def decisions(table: Any, spec: str, batch_groups: int) -> list[str]:
    result = replay_policy(table, parse_policy(spec), batch_groups=batch_groups)
    return [
        d if s is None else f"{d}:{s}"
        for d, s in result.decisions.select("decision", "stage").rows()
    ]


def test_start_version_is_the_stalest_observed_token_label() -> None:
    """§13.1: a group resumed across updates is measured from the version it started under
    (its first token label), where Dressage measures its end version."""
    table = _log(("0", None, 5), ("1", None, 5), ("2", ["0", "1", "2"], 5))
    result = replay_policy(table, parse_policy("prime-rl:max_off_policy_steps=1"), batch_groups=1)
    assert result.decisions["start_version_index"].to_list() == [0, 1, 0]
    assert result.decisions["decision"].to_list() == ["kept", "kept", "dropped_stale"]
    # Dressage with K = M + 1 keeps it: its end version is the newest.
    dressage = replay_policy(table, parse_policy("dressage:k=2"), batch_groups=1)
    assert dressage.decisions["decision"].to_list() == ["kept", "kept", "kept"]


def test_a_token_label_no_trajectory_ended_on_is_not_on_the_clock() -> None:
    """§13.1: a label that is never an observed version has no index, so it is ignored."""
    table = _log(("0", None, 5), ("1", None, 5), ("1", ["x", "1"], 5))
    result = replay_policy(table, parse_policy("prime-rl:max_off_policy_steps=0"), batch_groups=1)
    assert result.decisions["start_version_index"].to_list() == [0, 1, 1]


def test_lag_counts_version_numbers_when_the_labels_are_numbers() -> None:
    """§13.1 (issue 31): (start, end) = (0, 0), (3, 3), (0, 3) at M = 1: prime-rl drops the
    last group, 3 versions behind; counted in positions of observed versions (0, 3) it
    was 1 behind and kept. Versions 1 and 2, on which no trajectory ended, still count."""
    table = _log(("0", ["0"], 1), ("3", ["3"], 1), ("3", ["0", "3"], 1))
    spec = "prime-rl:max_off_policy_steps=1,clock=versions"
    assert decisions(table, spec, 1) == ["kept", "kept", "dropped_stale:arrival"]
    result = replay_policy(table, parse_policy(spec), batch_groups=1)
    assert result.to_dict()["policy"]["lag_unit"] == "version numbers"
    assert result.decisions["start_version"].to_list() == ["0", "3", "0"]
    # Labels that are not numbers keep observation order: the same log lettered keeps it.
    lettered = _log(("a", ["a"], 1), ("d", ["d"], 1), ("d", ["a", "d"], 1))
    assert decisions(lettered, spec, 1) == ["kept", "kept", "kept"]
    said = replay_policy(lettered, parse_policy(spec), batch_groups=1).to_dict()["policy"]
    assert said["lag_unit"] == "positions of observed versions"


def test_a_token_label_that_is_a_number_counts_though_no_trajectory_ended_on_it() -> None:
    """§13.1: in a log of numbered versions the start is the smallest number among the
    group's versions and token labels, observed or not; it has no observation index."""
    table = _log(("0", None, 1), ("2", None, 1), ("2", ["1", "2"], 1))
    result = replay_policy(
        table, parse_policy("prime-rl:max_off_policy_steps=0,clock=versions"), batch_groups=1
    )
    assert result.decisions["start_version"].to_list() == ["0", "2", "1"]
    assert result.decisions["start_version_index"].to_list() == [0, 1, None]
    assert result.decisions["decision"].to_list()[2] == "dropped_stale"


def test_the_default_clock_is_the_systems_step_count_not_the_newest_version() -> None:
    """§13.2 (issue 31): prime-rl, verl and NeMo-RL count staleness against their own step
    counter, which runs ahead of the weight versions; on a log without its own steps the
    default derives it as they do, one step per batch from the log's first version. With
    B = 1, versions 0, 0, 1, 1, 2 trail the steps 0..4: the 4th group is 2 steps behind
    (dropped at M = 1) where it is 0 versions behind the newest (kept by the old default)."""
    table = _log(("0", None, 1), ("0", None, 1), ("1", None, 1), ("1", None, 1), ("2", None, 1))
    for spec in (
        "prime-rl:max_off_policy_steps=1",
        "verl-drop:max_off_policy_threshold=2",
        "nemo-windowed",
    ):
        result = replay_policy(table, parse_policy(spec), batch_groups=1)
        assert [d == "kept" for d in result.decisions["decision"]] == [
            True, True, True, False, True,
        ]  # fmt: skip
        assert result.clock is not None and result.clock.name == "steps"
        assert result.to_dict()["policy"]["clock"] == "steps"
        assert any(note.startswith("clock: steps (the default") for note in result.summary.notes)
        versions = decisions(table, spec + ("," if ":" in spec else ":") + "clock=versions", 1)
        assert versions == ["kept"] * 5  # the override: the newest version


def test_the_logged_clock_needs_every_groups_step_and_numbered_versions() -> None:
    """§13.2: clock=logged on a log that cannot give it is a setting error saying why;
    clock=own falls back to steps there."""
    table = _log(("0", None, 1), ("1", None, 1))
    with pytest.raises(ConfigError, match="not every group carries a trainer step"):
        replay_policy(table, parse_policy("prime-rl:clock=logged"), batch_groups=1)
    own = replay_policy(table, parse_policy("prime-rl"), batch_groups=1, formats=("prime-rl",))
    assert own.clock is not None and own.clock.name == "steps"


def test_a_group_without_a_start_is_never_stale() -> None:
    """§13.1: no trajectory version and no observed token label: no start, never dropped."""
    table = _log(("0", None, 1), ("1", None, 1), ("2", None, 1), (None, None, 1))
    result = replay_policy(table, parse_policy("prime-rl:max_off_policy_steps=0"), batch_groups=1)
    assert result.decisions["start_version_index"].to_list()[3] is None
    assert result.decisions["decision"].to_list()[3] == "kept"


def test_verl_own_rule_may_keep_what_the_replay_drops_and_drop_what_it_keeps() -> None:
    """§13.1 (issue 31): the start version stands in for verl's g0, and no bound follows
    per group. B = 1, T = 1, (start, end, g0) = (0, 0, 1), (1, 1, 1), (1, 2, 2): verl
    keeps, drops, keeps; the replay keeps, keeps, drops. The note says no bound."""
    groups = (("0", ["0"], 1), ("1", ["1"], 1), ("2", ["1", "2"], 1))
    spec = "verl-drop:max_off_policy_threshold=1"
    verl = replay_policy(_log(*groups), parse_policy(spec), batch_groups=1)
    assert decisions(_log(*groups), spec, 1) == ["kept", "kept", "dropped_stale:pending"]
    own = verl_drop_reference(
        _records(*groups), max_off_policy_threshold=1, batch_groups=1, submitted=[1, 1, 2]
    )
    assert [d["decision"] for d in own.decisions] == ["kept", "dropped_stale", "kept"]
    said = [note for note in verl.summary.notes if "submitted" in note]
    assert said and "at least as much" not in said[0]
    assert "may drop a group this replay keeps and keep one it drops" in said[0]
    prime = replay_policy(_log(*groups), parse_policy("prime-rl"), batch_groups=1)
    assert not any("submitted" in note for note in prime.summary.notes)


def test_nemo_on_the_steps_clock_takes_a_start_above_the_step_as_fresh() -> None:
    """§13.2: a start index above the replay's step count is not held back by the window's
    upper bound (it would wait for ever); it counts as fresh."""
    table = _log(("0", None, 1), ("1", None, 1))
    assert decisions(table, "nemo-windowed:max_staleness_versions=0,clock=steps", 2) == [
        "kept", "kept",
    ]  # fmt: skip


def test_a_failed_group_advances_the_clock_but_never_waits() -> None:
    """§13.3 step 2: a failed group brings its version (sweeping the queue) and is failed."""
    table = _log(("0", None, 1), ("1", None, 1), aborted=(1,))
    assert decisions(table, "prime-rl:max_off_policy_steps=0,clock=versions", 3) == [
        "dropped_stale:pending", "failed",
    ]  # fmt: skip


def test_versions_clock_counts_observed_versions_not_batches() -> None:
    """§13.2: on the versions clock the trainer version is the newest observed index; on
    the steps clock it is the number of batches emitted."""
    # Five groups on one version, then one on the next: with B = 1 the replay's trainer
    # has taken five steps while one version was observed.
    table = _log(*[("0", None, 1)] * 5, ("1", None, 1), ("0", None, 1))
    versions = decisions(table, "prime-rl:max_off_policy_steps=1,clock=versions", 1)
    steps = decisions(table, "prime-rl:max_off_policy_steps=1,clock=steps", 1)
    assert versions == ["kept"] * 7  # lag at most 1 on the observed clock
    # On the steps clock the third group arrives when two batches were taken: lag 2 > 1.
    assert steps[:2] == ["kept", "kept"] and steps[2] == "dropped_stale:arrival"


def test_prime_rl_sweeps_its_queue_when_a_version_is_observed() -> None:
    """§13.3: a waiting group that a new version makes too stale is dropped then (pending)."""
    table = _log(("0", None, 1), ("1", None, 1), ("2", None, 1))
    assert decisions(table, "prime-rl:max_off_policy_steps=1,clock=versions", 4) == [
        "dropped_stale:pending", "kept", "kept",
    ]  # fmt: skip


def test_prime_rl_drops_a_group_stale_on_arrival_as_a_cancelled_one() -> None:
    """§13.3: a group whose start is already too old when it completes (prime-rl would have
    cancelled it in flight) is dropped on arrival."""
    table = _log(("0", None, 1), ("1", None, 1), ("2", None, 1), ("0", None, 1))
    assert decisions(table, "prime-rl:max_off_policy_steps=1", 1)[3] == "dropped_stale:arrival"


def test_verl_evicts_only_when_the_trainer_samples() -> None:
    """§13.3: verl has no arrival check: a stale group waits until the next sample() and is
    evicted there (stage pending); the threshold counts the span g - g0 + 1."""
    table = _log(("0", None, 1), ("1", None, 1), ("2", None, 1), ("0", None, 1))
    verl = decisions(table, "verl-drop:max_off_policy_threshold=2,clock=versions", 2)
    assert verl == ["kept", "kept", "kept", "dropped_stale:pending"]
    # T = 2 keeps lag <= 1, as prime-rl's M = 1 does; prime-rl drops the last one on arrival.
    prime = decisions(table, "prime-rl:max_off_policy_steps=1,clock=versions", 2)
    assert prime[3] == "dropped_stale:arrival"


def test_nemo_window_bounds_lag_as_prime_rl_does() -> None:
    """§13.3: NeMo's window s - M <= start keeps what prime-rl's M keeps, on every clock."""
    table = _log(("0", None, 1), ("1", None, 1), ("2", None, 1), ("0", None, 1), ("2", None, 1))
    for clock in ("versions", "steps"):
        assert decisions(
            table, f"nemo-windowed:max_staleness_versions=1,clock={clock}", 2
        ) == decisions(table, f"prime-rl:max_off_policy_steps=1,clock={clock}", 2)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    records=peer_logs(),
    bound=st.integers(0, 3),
    batch_groups=st.integers(1, 5),
    clock=st.sampled_from(("versions", "steps", "logged")),
)
def test_the_three_rules_keep_the_same_groups_on_an_eager_trainer(
    tmp_path: Path, records: list[dict[str, Any]], bound: int, batch_groups: int, clock: str
) -> None:
    """§13.4: the trainer takes a batch as soon as B groups wait, so no more than B ever
    wait; selection order then never matters, and the three rules keep the same groups
    with M = M = T - 1 on the same clock (they differ in when and at which stage they
    drop)."""
    table = analysis.load_logs([write_jsonl(records, tmp_path / "log.jsonl")])
    prepared = analysis.prepare(table)
    if clock == "logged" and not logged_clock_readable(records):
        clock = "steps"
    specs = [
        f"prime-rl:max_off_policy_steps={bound},clock={clock}",
        f"verl-drop:max_off_policy_threshold={bound + 1},clock={clock}",
        f"nemo-windowed:max_staleness_versions={bound},clock={clock}",
        f"nemo-windowed:max_staleness_versions={bound},order=freshest,clock={clock}",
    ]
    kept = [
        replay_policy(prepared, parse_policy(spec), batch_groups=batch_groups)
        .decisions.select("decision", "batch")
        .rows()
        for spec in specs
    ]
    assert all(k == kept[0] for k in kept[1:])


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(records=raw_logs(), bound=st.integers(0, 3), batch_groups=st.integers(1, 5))
def test_prime_rl_is_dressage_when_no_group_started_on_an_older_version(
    tmp_path: Path, records: list[dict[str, Any]], bound: int, batch_groups: int
) -> None:
    """§13.4: on the versions clock, with start = end version for every group, prime-rl's
    M is Dressage's K = M + 1 with the span control off (same decisions and stages)."""
    table = analysis.load_logs([write_jsonl(records, tmp_path / "log.jsonl")])
    prepared = analysis.prepare(table)
    prime = replay_policy(
        prepared,
        PrimeRLPolicy(max_off_policy_steps=bound, clock="versions"),
        batch_groups=batch_groups,
    )
    dressage = replay_policy(prepared, DressagePolicy(bound + 1), batch_groups=batch_groups)
    frame = prime.decisions
    versions = prime.summary.versions
    # Numbers count as positions when they are observed in order, one apart.
    positions = prime.to_dict()["policy"]["lag_unit"] != "version numbers" or versions == tuple(
        str(int(versions[0]) + i) for i in range(len(versions))
    )
    if positions and frame["start_version_index"].equals(frame["version_index"]):
        assert frame.select(DECISION_COLUMNS).equals(dressage.decisions.select(DECISION_COLUMNS))


def test_token_weighted_gap_weights_long_trajectories() -> None:
    """§10.6: a long trajectory two versions behind pulls the token-weighted mean towards 2."""
    table = _log(("0", None, 90), ("1", None, 5), ("2", None, 5))
    result = analysis.replay(table, analysis.ReplayConfig(batch_groups=3))
    assert result.summary.version_gap["mean"] == pytest.approx(1.0)
    assert result.summary.token_weighted["version_gap_mean"] == pytest.approx((90 * 2 + 5) / 100)


def test_token_weighted_figures_are_null_when_tokens_are_unknown() -> None:
    records = [
        {"group_index": 0, "metadata": {"parent_traj_id": "t", "dressage_end_token_version": "0"}}
    ]
    result = analysis.replay(
        analysis.records_to_table(records), analysis.ReplayConfig(batch_groups=1)
    )
    assert set(result.summary.token_weighted.values()) == {None}


# ------------------------------------------------------------- specs


@pytest.mark.parametrize(
    ("text", "knobs"),
    [
        ("dressage:k=2,m=1", {"keep_versions": 2, "max_preempts": 1}),
        ("dressage:keep_versions=0,max_preempts=none", {"keep_versions": 0, "max_preempts": None}),
        ("prime-rl:max_off_policy_steps=1", {"max_off_policy_steps": 1, "clock": "own"}),
        ("prime-rl", {"max_off_policy_steps": 8, "clock": "own"}),
        ("prime-rl:clock=versions", {"max_off_policy_steps": 8, "clock": "versions"}),
        ("prime-rl:clock=logged", {"max_off_policy_steps": 8, "clock": "logged"}),
        (
            "verl-drop:max_off_policy_threshold=2",
            {"max_off_policy_threshold": 2, "clock": "own"},
        ),
        (
            "nemo-windowed:max_staleness_versions=2,order=freshest,clock=steps",
            {"max_staleness_versions": 2, "order": "freshest", "clock": "steps"},
        ),
        # NeMo-RL's WindowedSamplerConfig defaults max_staleness_versions to 1.
        ("nemo-windowed", {"max_staleness_versions": 1, "order": "fifo", "clock": "own"}),
    ],
)
def test_specs_name_their_knobs(text: str, knobs: dict[str, Any]) -> None:
    policy = parse_policy(text)
    assert policy.knobs() == knobs
    assert parse_policy(policy.spec()) == policy
    assert parse_policy(policy.label()) == policy


@pytest.mark.parametrize(
    ("text", "error", "says"),
    [
        ("tinker:k=1", SettingSyntaxError, "no policy named 'tinker'"),
        ("prime-rl:m=1", SettingSyntaxError, "'m' is not a prime-rl knob"),
        (
            "dressage:k=2,clock=steps",
            SettingSyntaxError,
            "'clock' is not a dressage knob; its "
            "knobs: keep_versions \\(k\\), max_preempts \\(m\\)",
        ),
        (
            "prime-rl:max_off_policy_steps",
            SettingSyntaxError,
            "max_off_policy_steps needs a value: write max_off_policy_steps=VALUE",
        ),
        ("dressage:k=2,keep_versions=3", SettingSyntaxError, "keep_versions is given twice"),
        (
            "verl-drop:max_off_policy_threshold=2,max_off_policy_threshold=3",
            SettingSyntaxError,
            "max_off_policy_threshold is given twice",
        ),
        (
            "dressage:k=2000000",
            ConfigError,
            "require k= \\(keep_versions\\) between 0 and 1,000,000 \\(found 2,000,000\\)",
        ),
        ("dressage:m=2000000", ConfigError, "require m= \\(max_preempts\\) between"),
        ("prime-rl:max_off_policy_steps=2000000", ConfigError, "\\(found 2,000,000\\)"),
        (
            "areal:eta=1",
            SettingSyntaxError,
            "areal is admission control, not a policy replayed "
            "here: give it as admission=areal:max_head_offpolicyness=N",
        ),
        ("prime-rl:max_off_policy_steps=x", SettingSyntaxError, "whole number"),
        ("prime-rl:max_off_policy_steps=-1", ConfigError, "between 0 and"),
        ("verl-drop:max_off_policy_threshold=0", ConfigError, "between 1 and"),
        ("prime-rl:clock=wall", ConfigError, "clock is one of own, steps, logged, versions"),
        ("nemo-windowed:max_staleness_versions=1,order=random", ConfigError, "fifo, freshest"),
        ("dressage:k=-1", ConfigError, "keep_versions"),
    ],
)
def test_bad_specs_say_what_is_wrong(text: str, error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=says) as raised:
        parse_policy(text)
    if says.startswith(("no policy", "'m' is not")):  # the hint lists every policy's knobs
        assert "known: dressage:keep_versions=,max_preempts=; prime-rl:" in str(raised.value)


def test_a_policy_result_shows_its_policy_not_k_and_m() -> None:
    table = analysis.load_logs([Path("sample_data/rollouts.jsonl")])
    peer = repr(replay_policy(table, parse_policy("prime-rl:max_off_policy_steps=1")))
    assert peer.startswith("PolicyResult(prime-rl:max_off_policy_steps=1, B=4, clock=steps: ")
    assert "K=" not in peer and "M=" not in peer and "rejected" not in peer
    own = repr(replay_policy(table, parse_policy("dressage:k=2,m=1")))
    assert own.startswith("PolicyResult(dressage:k=2,m=1, B=4: ") and "rejected" in own


def test_sweep_of_policies_is_one_table(tmp_path: Path) -> None:
    table = analysis.load_logs([Path("sample_data/rollouts.jsonl")])
    prepared = analysis.prepare(table)
    specs = [
        "dressage:k=2,m=1",
        "prime-rl:max_off_policy_steps=1",
        "verl-drop:max_off_policy_threshold=2",
    ]
    result = sweep_policies(prepared, [parse_policy(s) for s in specs])
    assert result.rows["policy"].to_list() == specs  # labels: defaults left out
    assert result.rows["keep_versions"].to_list() == [2, None, None]
    single = replay_policy(prepared, parse_policy(specs[1]))
    kept, total = single.summary.counts["groups"]["kept"], single.summary.counts["groups"]["total"]
    assert kept is not None and total is not None
    assert result.rows["groups_kept_pct"][1] == pytest.approx(100 * kept / total)
