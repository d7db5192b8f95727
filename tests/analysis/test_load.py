"""Loaders: every format gives the same canonical table, and bad input says where and what."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import analysis
from analysis.errors import (
    DamagedFileError,
    InputNotFoundError,
    LogFormatError,
    MissingFieldError,
    UnknownFormatError,
    UnsafePickleError,
)
from analysis.formats.pickled.pickles import dump_pt, load_pickled

CONFIGS = [
    analysis.ReplayConfig(keep_versions=k, max_preempts=m, batch_groups=b)
    for k, m, b in [(0, None, 3), (1, 0, 3), (2, 1, 2), (3, 2, 5), (1, None, None)]
]


def replays(table: pl.DataFrame) -> list[tuple[pl.DataFrame, dict[str, Any]]]:
    return [
        (result.decisions, result.summary.to_dict())
        for result in analysis.replay_many(table, CONFIGS)
    ]


def _by_members(table: pl.DataFrame) -> dict[str, str]:
    """Each group id mapped to a name made of its trajectory ids (the same in any format)."""
    members = table.group_by("group_id").agg(pl.col("trajectory_id").unique().sort())
    return {
        group: ",".join(map(str, ids))
        for group, ids in members.select("group_id", "trajectory_id").iter_rows()
    }


def test_every_format_gives_identical_decisions_and_summaries(
    small_logs: dict[str, Path], tmp_path: Path
) -> None:
    reference = replays(analysis.load_logs([small_logs["jsonl"]]))
    reference_names = _by_members(analysis.load_logs([small_logs["jsonl"]]))
    converted = tmp_path / "run.parquet"
    analysis.write_canonical(analysis.load_logs([small_logs["jsonl"]]), converted)
    others = [*(small_logs[k] for k in ("jsonl.gz", "artifacts", "pt")), converted]
    for source in others:
        table = analysis.load_logs([source])
        # Dressage's artifacts carry no group id: their groups are attempts, named
        # otherwise, so groups are compared by their trajectories.
        named = _by_members(table)
        for (decisions, summary), (expected_decisions, expected_summary) in zip(
            replays(table), reference, strict=True
        ):
            assert_frame_equal(
                decisions.with_columns(pl.col("group_id").replace_strict(named)),
                expected_decisions.with_columns(pl.col("group_id").replace_strict(reference_names)),
            )
            assert summary == expected_summary, source
    # The log is not trivial: the settings above must disagree with each other.
    assert len({json.dumps(s, sort_keys=True) for _, s in reference}) == len(CONFIGS)


def test_canonical_columns_and_spans_only(small_logs: dict[str, Path]) -> None:
    table = analysis.load_logs([small_logs["jsonl"]])
    assert list(table.columns) == list(analysis.CANONICAL_SCHEMA)
    assert "full_versions" not in table.columns
    first = table.row(0, named=True)
    assert first["version_spans"][0]["version"] == "-1"
    assert first["version_spans"][-1]["end"] == first["token_count"]


def test_parquet_round_trip_is_exact(small_logs: dict[str, Path], tmp_path: Path) -> None:
    table = analysis.load_logs([small_logs["pt"]])
    analysis.write_canonical(table, tmp_path / "log.parquet")
    analysis.write_canonical(table, tmp_path / "log.arrow")
    for name in ("log.parquet", "log.arrow"):
        again = analysis.load_logs([tmp_path / name])
        assert_frame_equal(again.drop("source"), table.drop("source"))


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "arrow", "artifacts"])
def test_only_the_columns_asked_for(small_logs: dict[str, Path], tmp_path: Path, kind: str) -> None:
    """load_logs(columns=...) keeps those columns (canonical order, extra fields after)
    with the same values, and a replay of that table is the replay of the whole one."""
    extra = ["metadata.dressage_return_rollout_id"]
    source = small_logs.get(kind)
    if source is None:
        source = tmp_path / f"log.{kind}"
        table = analysis.load_logs([small_logs["jsonl"]], extra_fields=extra)
        analysis.write_canonical(table, source)
    whole = analysis.load_logs([source], extra_fields=extra)
    asked = ["trainer_step", *analysis.REPLAY_COLUMNS, "source"]
    part = analysis.load_logs([source], columns=asked, extra_fields=extra)
    expected = [c for c in analysis.CANONICAL_SCHEMA if c in asked]
    assert part.columns == [*expected, *extra]
    assert_frame_equal(part, whole.select(part.columns))
    for (decisions, summary), (expected_decisions, expected_summary) in zip(
        replays(part), replays(whole), strict=True
    ):
        assert_frame_equal(decisions, expected_decisions)
        assert summary == expected_summary
    # An extra field that is a canonical column is kept even when not asked for.
    kept = "reward" if kind != "artifacts" else "completed_at"  # Dressage writes no reward
    with_reward = analysis.load_logs([source], columns=analysis.REPLAY_COLUMNS, extra_fields=[kept])
    assert with_reward[kept].to_list() == whole[kept].to_list()
    with pytest.raises(ValueError, match="not canonical columns: reward_sum"):
        analysis.load_logs([source], columns=["reward_sum"])


def test_dumps_are_ordered_by_rollout_id_not_name(small_logs: dict[str, Path]) -> None:
    table = analysis.load_logs([small_logs["pt"]])
    steps = table["trainer_step"].to_list()
    assert steps == sorted(steps)
    assert max(steps) >= 10  # so that name order (rollout_10 before rollout_2) would differ


def test_several_inputs_are_read_in_the_order_given(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(json.dumps({"group_index": 1}) + "\n")
    second.write_text(json.dumps({"group_index": 2}) + "\n")
    table = analysis.load_logs([second, first])
    assert table["group_id"].to_list() == ["2", "1"]


def test_a_folder_of_logs_is_read_in_name_order(tmp_path: Path) -> None:
    # Written in another order than their names, so neither creation order nor the order
    # the folder lists them in (often creation order) would pass.
    for name, group in (("run-2.jsonl", 2), ("Run-3.jsonl", 3), ("run-10.jsonl", 10)):
        (tmp_path / name).write_text(json.dumps({"group_index": group}) + "\n")
    (tmp_path / "run-1.jsonl").write_text(json.dumps({"group_index": 1}) + "\n")
    table = analysis.load_logs([tmp_path])
    # By code point, as Path sorts: upper case before lower case, "10" before "2".
    assert table["group_id"].to_list() == ["3", "1", "10", "2"]


def test_flat_keys_and_fallback_fields(tmp_path: Path) -> None:
    path = tmp_path / "flat.jsonl"
    rows = [
        {"instance_id": "p1", "session_id": "s1", "dressage_end_token_version": 5,
         "segment_index": None},
        {"metadata": {"dressage_return_async_group_id": "async-1", "instance_id": "x"},
         "trajectory_id": "t9", "full_versions": ["-1", "7"], "tokens": [0, 1]},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = analysis.load_logs([path])
    assert table.select("group_id", "trajectory_id", "segment_index", "end_version").rows() == [
        ("p1", "s1", 0, "5"),
        ("async-1", "t9", 0, "7"),
    ]
    assert table["end_version_derived"].to_list() == [False, True]


def test_field_override_replaces_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "custom.jsonl"
    path.write_text(json.dumps({"group_index": 1, "meta": {"prompt": "p-7"}}) + "\n")
    fields = analysis.FieldMap().override(group="meta.prompt")
    assert analysis.load_logs([path], fields=fields)["group_id"].to_list() == ["p-7"]


def test_missing_group_names_fields_and_option(tmp_path: Path) -> None:
    path = tmp_path / "nogroup.jsonl"
    path.write_text(json.dumps({"index": 3, "metadata": {"parent_traj_id": "t"}}) + "\n")
    with pytest.raises(
        MissingFieldError,
        match=r"nogroup.jsonl:1: no group id .*index, metadata.parent_traj_id.*fields=group=PATH",
    ):
        analysis.load_logs([path])


def test_invalid_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps({"group_index": 1}) + "\n" + '{"group_index": 2,\n')
    # Cut short: where the line ends, not "column 1" of the line after it.
    with pytest.raises(
        LogFormatError,
        match=r"broken.jsonl:2: not valid JSON \(the line ends before the record does "
        r"\(Expecting property name enclosed in double quotes\)\)",
    ):
        analysis.load_logs([path])
    path.write_text('{"group_index": 1, "x": "abc\n')  # cut inside a string
    with pytest.raises(
        LogFormatError,
        match=r"the line ends before the record does \(Invalid control character at column",
    ):
        analysis.load_logs([path])
    path.write_text('{"group_index": 1} {"group_index": 2}\n')
    with pytest.raises(
        LogFormatError, match=r"broken.jsonl:1: not valid JSON \(Extra data, column 20\)"
    ):
        analysis.load_logs([path])
    path.write_text('{"group_index": 1, "status": "compl')  # the last line, cut in a string
    with pytest.raises(
        LogFormatError, match=r"not valid JSON \(Unterminated string starting at column 30\)"
    ):
        analysis.load_logs([path])
    path.write_text('{"group_index": 1, "index": 1000000000000000000000000000000}\n')
    with pytest.raises(LogFormatError, match=r"index is too large for a 64-bit integer"):
        analysis.load_logs([path])  # (the parser reads it as the float 1e+30)
    path.write_text(json.dumps({"group_index": 1}) + "\n" + '{"group_index": 2,\n')
    report = analysis.LoadReport()
    table = analysis.load_logs([path], on_bad_record="skip", report=report)
    assert table.height == 1
    assert sum(report.skipped.values()) == 1


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"group_index": 0, "metadata": {"segment_index": 1.5}}, "segment_index must be an integer"),
        ({"group_index": 0, "response_length": -2}, "response_length must be between 0 and"),
        ({"group_index": 0, "response_length": 2**41}, "response_length must be between 0 and"),
        ({"group_index": 0, "metadata": {"full_versions": "v1"}}, "full_versions must be a list"),
        ({"group_index": 0, "metadata": {"version_spans": [{"start": 1, "end": 2, "version": "a"}]}},
         "consecutive runs from 0"),
        ([1, 2], "must be a JSON object"),
    ],
)  # fmt: skip
def test_wrong_types_are_bad_records(tmp_path: Path, record: object, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(LogFormatError, match=message):
        analysis.load_logs([path])


def test_missing_path_and_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(InputNotFoundError, match="no such file"):
        analysis.load_logs([tmp_path / "absent.jsonl"])
    odd = tmp_path / "notes.txt"
    odd.write_text("hello\n")
    with pytest.raises(UnknownFormatError, match="unknown format"):
        analysis.load_logs([odd])
    with pytest.raises(UnknownFormatError, match="no slime dumps"):
        analysis.load_logs([tmp_path])


@pytest.mark.parametrize(
    ("beside", "read", "unread"),
    [
        (["run.jsonl", "table.parquet"], "the JSONL file", "1 Parquet/Arrow file (table.parquet)"),
        (["dumps", "run.jsonl"], "the 12 slime dump files", "1 JSONL file (run.jsonl)"),
        (["artifacts", "run.jsonl"], "the artifact tree", "1 JSONL file (run.jsonl)"),
        (["dumps", "artifacts"], "the 12 slime dump files", "a Dressage artifact tree"),
    ],
)
def test_a_folder_of_several_kinds_of_log_reads_one_and_names_the_rest(
    small_logs: dict[str, Path], tmp_path: Path, beside: list[str], read: str, unread: str
) -> None:
    """Once the other kinds were passed over without a word."""
    import shutil

    for name in beside:
        if name == "table.parquet":
            analysis.convert_logs([small_logs["jsonl"]], tmp_path / name)
        elif name == "run.jsonl":
            shutil.copy(small_logs["jsonl"], tmp_path / name)
        else:  # the dumps' or the artifact tree's contents, at the folder's top
            shutil.copytree(
                small_logs[{"dumps": "pt"}.get(name, name)], tmp_path, dirs_exist_ok=True
            )
    report = analysis.LoadReport()
    table = analysis.load_logs([tmp_path], report=report)
    assert table.height == analysis.load_logs([small_logs["jsonl"]]).height  # one copy only
    (warning,) = report.warnings
    assert f"read {read}" in warning and unread in warning and "pass those files" in warning


def test_folders_find_logs_by_any_case_and_gzipped_ndjson(
    small_logs: dict[str, Path], tmp_path: Path
) -> None:
    data = small_logs["jsonl"].read_bytes()
    (tmp_path / "RUN.JSONL").write_bytes(data)
    (tmp_path / "more.ndjson.gz").write_bytes(gzip.compress(data))
    report = analysis.LoadReport()
    table = analysis.load_logs([tmp_path], report=report)
    assert table.height == 2 * analysis.load_logs([small_logs["jsonl"]]).height
    assert report.warnings == [] and [s.format for s in report.sources] == ["jsonl", "jsonl"]


def test_a_parquet_file_of_raw_records_gets_advice_that_leads_somewhere(
    small_records: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The advice was to `convert` it, which refused it with the same advice."""
    raw = tmp_path / "raw.parquet"
    pl.DataFrame(
        [{k: v for k, v in r.items() if k != "metadata"} for r in small_records]
    ).write_parquet(raw)
    for attempt in (
        analysis.load_logs,
        lambda paths: analysis.convert_logs(paths, tmp_path / "o.parquet"),
    ):
        with pytest.raises(MissingFieldError, match="write raw records as JSONL instead") as caught:
            attempt([raw])
        assert "write it with `dressage-replay convert`" not in str(caught.value)


def test_field_overrides_on_canonical_input_are_said_to_do_nothing(
    small_logs: dict[str, Path], tmp_path: Path
) -> None:
    canonical = tmp_path / "log.parquet"
    analysis.convert_logs([small_logs["jsonl"]], canonical)
    report = analysis.LoadReport()
    moved = analysis.FieldMap().override(group="metadata.elsewhere")
    analysis.load_logs([canonical], fields=moved, report=report)
    assert any("fields does not apply to canonical" in w for w in report.warnings)
    report = analysis.LoadReport()
    analysis.load_logs([canonical], report=report)
    assert report.warnings == []


def test_an_input_given_twice_and_an_empty_log_are_warned_about(
    small_logs: dict[str, Path], tmp_path: Path
) -> None:
    """Both were quiet: the first double-counted every record, the second looked like a
    log in which nothing happened."""
    report = analysis.LoadReport()
    once = analysis.load_logs([small_logs["jsonl"]])
    twice = analysis.load_logs([small_logs["jsonl"], small_logs["jsonl"]], report=report)
    assert twice.height == 2 * once.height
    assert report.warnings == [
        f"{small_logs['jsonl'].resolve()}: given 2 times, so its records are read 2 times; "
        "pass each input once"
    ]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    report = analysis.LoadReport()
    assert analysis.load_logs([empty], report=report).height == 0
    assert report.warnings == ["no records were read from the inputs"]
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{oops\n")
    report = analysis.LoadReport()
    analysis.load_logs([broken], report=report, on_bad_record="skip")
    assert report.warnings == ["no records were read: every one was skipped"]


def test_sniffs_gzip_without_extension(tmp_path: Path) -> None:
    path = tmp_path / "log.data"
    with gzip.open(path, "wt") as handle:
        handle.write(json.dumps({"group_index": 4}) + "\n")
    assert analysis.load_logs([path])["group_id"].to_list() == ["4"]


def _without_completion_times(folder: Path) -> list[Path]:
    """The segment files of ``folder``, their completion times removed (as in artifacts of
    a Dressage build that did not write them): only file times can order them."""
    files = sorted(folder.rglob("samples/*.json"))
    for path in files:
        record = json.loads(path.read_text())
        del record["metadata"]["proxy_extra_info"]["timestamp"]
        path.write_text(json.dumps(record))
    return files


def test_artifact_mtime_ties_are_warned(
    small_records: list[dict[str, Any]], tmp_path: Path
) -> None:
    from analysis.output.raw_artifacts import write_artifacts

    write_artifacts(small_records[:6], tmp_path / "art")
    files = _without_completion_times(tmp_path / "art")
    assert len(files) == 6
    # Two pairs tied, two files apart: the warning counts the four.
    for path, stamp in zip(files, (1.8e9, 1.8e9, 1.9e9, 1.9e9, 2.0e9, 2.1e9), strict=True):
        os.utime(path, (stamp, stamp))
    report = analysis.LoadReport()
    analysis.load_logs([tmp_path / "art"], report=report)
    assert [w.split(" share")[0] for w in report.warnings if "share a modification" in w] == [
        "4 of 6 artifact files"
    ]
    for path, stamp in zip(files, range(6), strict=True):
        os.utime(path, (1.8e9 + stamp, 1.8e9 + stamp))
    report = analysis.LoadReport()
    analysis.load_logs([tmp_path / "art"], report=report)
    assert not any("share a modification" in w for w in report.warnings)
    # untied file times still order the files only as a fallback, which is said
    assert any("carry no completion time" in w for w in report.warnings)


def test_artifacts_arrive_in_completion_order_whatever_their_file_times(
    small_records: list[dict[str, Any]], tmp_path: Path
) -> None:
    """Dressage writes each trajectory's completion time into its artifacts; a copy or a
    checkout changes file times (issue: a fresh clone's sample artifacts kept 0 groups at
    K=1). A group arrives when its last trajectory completed."""
    from analysis.output.raw_artifacts import write_artifacts

    write_artifacts(small_records, tmp_path / "art")
    expected = analysis.load_logs([tmp_path / "art"])["group_id"].unique(maintain_order=True)
    files = sorted((tmp_path / "art").rglob("samples/*.json"))
    for stamp, path in enumerate(reversed(files)):  # file times now run backwards
        os.utime(path, (1.8e9 + stamp, 1.8e9 + stamp))
    report = analysis.LoadReport()
    table = analysis.load_logs([tmp_path / "art"], report=report)
    assert table["group_id"].unique(maintain_order=True).to_list() == expected.to_list()
    assert report.warnings == []
    by_file_times = (
        analysis.load_logs(
            [tmp_path / "art"], fields=analysis.FieldMap().override(completed_at="no.such.field")
        )["group_id"]
        .unique(maintain_order=True)
        .to_list()
    )
    assert by_file_times != expected.to_list()


# --------------------------------------------------------------------------- pickles


class _RunsCommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = {"rollout_id": 0, "samples": [{"group_index": 0, "evil": _RunsCommand(marker)}]}
    bare = tmp_path / "evil.pkl"
    bare.write_bytes(pickle.dumps(payload))
    archive = tmp_path / "evil.pt"
    dump_pt(payload, archive)
    for path in (bare, archive):
        with pytest.raises(UnsafePickleError, match="trust_pickle=True"):
            analysis.load_logs([path])
    assert not marker.exists()


def test_bare_pickle_of_plain_dicts_reads_safely(tmp_path: Path) -> None:
    path = tmp_path / "old.pkl"
    path.write_bytes(pickle.dumps([{"group_index": 1, "metadata": {"parent_traj_id": "t"}}]))
    assert analysis.load_logs([path])["trajectory_id"].to_list() == ["t"]


def test_torch_reads_our_dumps_and_we_read_torch_save(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    ours = tmp_path / "ours.pt"
    dump_pt({"rollout_id": 3, "samples": [{"group_index": 1, "reward": 0.5}]}, ours)
    assert torch.load(ours)["samples"][0]["reward"] == 0.5

    theirs = tmp_path / "rollout_7.pt"
    sample = {
        "group_index": 2,
        "rollout_log_probs": torch.tensor([-0.1, -0.2]),
        "metadata": {"parent_traj_id": "t", "dressage_end_token_version": "v3"},
    }
    torch.save({"rollout_id": 7, "samples": [sample]}, theirs)
    obj = load_pickled(theirs)
    assert "rollout_log_probs" in obj["samples"][0]  # present but skipped, torch not imported
    table = analysis.load_logs([theirs])
    assert table.select("group_id", "trainer_step", "end_version").row(0) == ("2", 7, "v3")
    trusted = analysis.load_logs([theirs], trust_pickle=True)
    assert_frame_equal(trusted, table)


# --------------------------------------------------------------------------- review findings


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"dressage_end_token_version": {"x": 1}}, "a label must be a string or an integer"),
        ({"full_versions": [["-1"], "v"]}, "a label must be a string or an integer"),
        ({"full_versions": ["-1", True]}, "a label must be a string or an integer"),
        ({"full_versions": ["-1", float("nan")]}, "NaN"),
    ],
)
def test_labels_of_the_wrong_type_are_bad_records(
    tmp_path: Path, metadata: dict[str, Any], message: str
) -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"group_index": 0, "tokens": [1, 2], "metadata": metadata}) + "\n")
    with pytest.raises(LogFormatError, match=message):
        analysis.load_logs([path])


def test_metadata_must_be_an_object(tmp_path: Path) -> None:
    path = tmp_path / "meta.jsonl"
    path.write_text(json.dumps({"group_index": 0, "metadata": "oops"}) + "\n")
    with pytest.raises(LogFormatError, match=r"metadata must be an object.*on_bad_record=skip"):
        analysis.load_logs([path])


def test_integral_float_labels_and_ids_read_as_integers() -> None:
    table = analysis.records_to_table(
        [{"group_index": 3.0, "tokens": [0, 1, 2],
          "metadata": {"parent_traj_id": "t", "full_versions": [-1.0, 3.0, 3]}}]
    )  # fmt: skip
    assert table["group_id"].to_list() == ["3"]
    result = analysis.replay(table, analysis.ReplayConfig(max_preempts=0, batch_groups=1))
    assert result.decisions["decision"].to_list() == ["kept"]


@pytest.mark.parametrize("value", [2.5, float("inf"), float("nan")])
@pytest.mark.parametrize("where", ["group", "end version", "token version"])
def test_other_floats_are_not_labels_or_ids(value: float, where: str) -> None:
    """Once 2.5 became group "2.5" and inf "inf", while NaN was refused."""
    metadata: dict[str, object] = {"parent_traj_id": "t", "full_versions": ["v1", "v1"]}
    record: dict[str, object] = {"group_index": 1, "metadata": metadata}
    if where == "group":
        record["group_index"] = value
    elif where == "end version":
        metadata["dressage_end_token_version"] = value
    else:
        metadata["full_versions"] = ["v1", value]
    with pytest.raises(LogFormatError, match="must be a string or an integer"):
        analysis.records_to_table([record])


def test_order_by_field_reorders_and_guards(tmp_path: Path) -> None:
    path = tmp_path / "timed.jsonl"
    rows = [
        {"group_index": "late", "done": 5.0, "metadata": {"parent_traj_id": "a", "dressage_end_token_version": "v2"}},
        {"group_index": "early", "done": 1.0, "metadata": {"parent_traj_id": "b", "dressage_end_token_version": "v1"}},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = analysis.load_logs([path], extra_fields=["done"])
    result = analysis.replay(table, analysis.ReplayConfig(batch_groups=1), order_by="done")
    assert result.decisions["group_id"].to_list() == ["early", "late"]
    assert result.summary.versions == ("v1", "v2")
    same = analysis.load_logs([path], extra_fields=["group_id"])
    assert same["group_id"].to_list() == ["late", "early"]  # a canonical column is not overwritten
    with pytest.raises(MissingFieldError, match="no record has the field 'absent'"):
        analysis.load_logs([path], extra_fields=["absent"])


@pytest.mark.parametrize(
    ("values", "found"),
    [
        # polars made them all text, which sorts "10" before "5"
        (["5", 10, 15], "a number value where earlier records hold text"),
        ([[3], [1], [2]], "list values"),  # was passed over: arrival stayed in input order
        ([{"t": 1}, {"t": 0}, {"t": 2}], "object values"),
        ([True, 1, 0], "a number value where earlier records hold boolean"),
    ],
)
def test_an_ordering_field_of_mixed_or_nested_values_is_refused(
    tmp_path: Path, values: list[object], found: str
) -> None:
    path = tmp_path / "log.jsonl"
    rows = [
        {"group_index": f"g{i}", "t": value, "metadata": {"parent_traj_id": "a"}}
        for i, value in enumerate(values)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    where = f"{path}: record {2 if found.startswith('a ') else 1}: field t holds {found}"
    with pytest.raises(LogFormatError, match=re.escape(where)):
        analysis.load_logs([path], extra_fields=["t"])


def test_an_ordering_field_of_another_kind_in_another_file_is_refused(tmp_path: Path) -> None:
    """Each file of one kind: caught when their chunks meet, in load_logs and in convert
    (which wrote the second file's numbers as text, in the first file's column type)."""
    files = []
    for name, value in (("text", "5"), ("number", 10)):
        log = tmp_path / f"{name}.jsonl"
        record = {"group_index": name, "t": value, "metadata": {"parent_traj_id": "a"}}
        log.write_text(json.dumps(record) + "\n")
        files.append(tmp_path / f"{name}.parquet")
        analysis.convert_logs([log], files[-1], extra_fields=["t"])  # one chunk each
    message = f"field t holds number values where {files[0]} holds text"
    with pytest.raises(LogFormatError, match=re.escape(message)):
        analysis.load_logs(files, extra_fields=["t"])
    with pytest.raises(LogFormatError, match=re.escape(message)):
        analysis.convert_logs(files, tmp_path / "both.parquet", extra_fields=["t"])
    assert not (tmp_path / "both.parquet").exists()


def test_prepare_refuses_an_ordering_column_of_lists(tmp_path: Path) -> None:
    table = pl.DataFrame({"group_id": ["a"], "t": [[1, 2]]})
    with pytest.raises(
        analysis.ConfigError, match=r"order_by=t: the field holds List\(Int64\) values"
    ):
        analysis.prepare(
            analysis.records_to_table([{"group_index": "a"}]).with_columns(table["t"]),
            order_by="t",
        )


def test_order_by_a_column_the_replay_also_reads(tmp_path: Path) -> None:
    """--order-by trainer_step: the ordering column is one prepare() reads anyway."""
    path = tmp_path / "steps.jsonl"
    rows = [
        {"group_index": "second", "metadata": {"parent_traj_id": "a", "dressage_return_rollout_id": 2}},
        {"group_index": "first", "metadata": {"parent_traj_id": "b", "dressage_return_rollout_id": 1}},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = analysis.load_logs([path])
    result = analysis.replay(table, analysis.ReplayConfig(batch_groups=1), order_by="trainer_step")
    assert result.decisions["group_id"].to_list() == ["first", "second"]


def test_single_pretty_json_file_and_absolute_glob(tmp_path: Path) -> None:
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"group_index": 1, "metadata": {"parent_traj_id": "t"}}, indent=2))
    assert analysis.load_logs([one])["trajectory_id"].to_list() == ["t"]
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text(json.dumps({"group_index": name}) + "\n")
    assert analysis.load_logs([str(tmp_path / "*.jsonl")])["group_id"].to_list() == [
        "a.jsonl",
        "b.jsonl",
    ]


def test_outputs_get_ordinary_permissions(tmp_path: Path, small_logs: dict[str, Path]) -> None:
    target = tmp_path / "log.parquet"
    analysis.write_canonical(analysis.load_logs([small_logs["jsonl"]]), target)
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    # A folder (artifacts, dumps) too: it is made with mkdtemp, which makes it private.
    for kind in ("artifacts", "pt"):
        folder = tmp_path / kind
        analysis.write_log(analysis.simulate(analysis.SimulationConfig(n_groups=2)), folder, kind)
        assert folder.stat().st_mode & 0o777 == 0o777 & ~umask


def test_dumps_are_byte_for_byte_reproducible(tmp_path: Path) -> None:
    payload = {"rollout_id": 1, "samples": [{"group_index": 0}]}
    dump_pt(payload, tmp_path / "a.pt", archive_name="rollout_1")
    dump_pt(payload, tmp_path / "b.pt", archive_name="rollout_1")
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()


def test_a_damaged_file_is_told_apart_from_a_bad_record(tmp_path: Path) -> None:
    lines = "".join(json.dumps({"group_index": g}) + "\n" for g in range(2000))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(lines.encode())[:2000])  # copied only in part
    archive = tmp_path / "dump.pt"
    archive.write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    # Footer whole, data pages overwritten.
    table = tmp_path / "table.parquet"
    analysis.write_canonical(
        analysis.records_to_table([{"group_index": g, "status": "completed"} for g in range(500)]),
        table,
    )
    data = bytearray(table.read_bytes())
    data[4 : len(data) // 2] = b"\xff" * (len(data) // 2 - 4)
    table.write_bytes(bytes(data))
    for path in (cut, archive, table):
        with pytest.raises(DamagedFileError, match="check that the file is whole") as caught:
            analysis.load_logs([path])
        assert "fix the record" not in str(caught.value)
        assert caught.value.exit_code == 5
    report = analysis.LoadReport()
    kept = analysis.load_logs([cut, archive, table], on_bad_record="skip", report=report)
    assert 0 < kept.height < 2000  # the records before the break are kept
    assert report.skipped == {"damaged file": 3}


def test_a_damaged_archive_with_trust_pickle_is_a_damaged_file(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    archive = tmp_path / "dump.pt"
    archive.write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(DamagedFileError, match=r"not a readable torch\.save archive"):
        analysis.load_logs([archive], trust_pickle=True)


def test_a_broken_link_in_a_log_folder_is_named(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(json.dumps({"group_index": 1}) + "\n")
    (tmp_path / "b.jsonl").symlink_to(tmp_path / "gone.jsonl")
    report = analysis.LoadReport()
    assert analysis.load_logs([tmp_path], report=report)["group_id"].to_list() == ["1"]
    assert report.warnings == [
        f"{tmp_path}: not read, as the files they link to are not there: b.jsonl"
    ]


@pytest.mark.parametrize("value", [-5, 2**63 - 1])
def test_a_canonical_token_count_out_of_range_is_a_bad_value(
    tmp_path: Path, small_logs: dict[str, Path], value: int
) -> None:
    """Accepted before: the totals came out negative (2^63 - 1 overflowed their sum)."""
    table = analysis.load_logs([small_logs["jsonl"]])
    bad = tmp_path / "bad.parquet"
    table.with_columns(
        pl.when(pl.int_range(pl.len()) == 3)
        .then(value)
        .otherwise(pl.col("response_length"))
        .alias("response_length")
    ).write_parquet(bad)
    with pytest.raises(LogFormatError, match=f"column response_length holds {value:,} in row 4"):
        analysis.load_logs([bad])


def test_a_folder_of_broken_links_only_names_them(tmp_path: Path) -> None:
    (tmp_path / "b.jsonl").symlink_to(tmp_path / "gone.jsonl")
    with pytest.raises(
        UnknownFormatError, match=r"only links to files that are not there: b\.jsonl"
    ):
        analysis.load_logs([tmp_path])


def test_one_path_given_alone_is_read_as_one_input(small_logs: dict[str, Path]) -> None:
    """A notebook user writes load_logs("run.jsonl"): its characters are not paths."""
    as_list = analysis.load_logs([small_logs["jsonl"]])
    assert analysis.load_logs(str(small_logs["jsonl"])).equals(as_list)
    assert analysis.load_logs(small_logs["jsonl"]).equals(as_list)
