"""Hypothesis strategies for raw slime-style logs (lists of record dicts, docs/semantics.md §1).

The logs are small (at most ``MAX_RECORDS`` records) but hit the corners of the
docs/semantics.md: labels whose sort order disagrees with the order they are seen in, integer and
padded labels, every kind of non-real label, id-less records, segments out of order
or with null/missing ``segment_index``, end versions that are missing or null (so they
are derived from ``full_versions`` or ``version_spans``), trajectories without token
versions, aborted records, and every group-field style.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

MAX_RECORDS = 30

# Real labels: sort order deliberately disagrees with any particular arrival order
# ("b"/"a", "10"/"9", "alpha"/"aardvark"); 3, "3" and " 3 " are one label, "03" another.
REAL_LABELS: tuple[Any, ...] = (
    "a",
    "b",
    "9",
    "10",
    "alpha",
    "aardvark",
    "release-candidate",
    " weight-current ",
    "weight-current",
    3,
    "3",
    " 3 ",
    "03",
    7,
)
NUMBER_LABELS: tuple[Any, ...] = (0, 1, "1", 2, "3", 4, " 5 ", 7, 10, "12")
"""Labels that are whole numbers (a log of these counts peer lags in numbers, §13.1); add
one of REAL_LABELS to a pool of them to get a log that is not numbered."""
NOT_REAL_LABELS: tuple[Any, ...] = ("-1", -1, "unknown", " None ", "", None, "UNKNOWN", "none")
PROMPT_LABELS: tuple[Any, ...] = ("-1", "-1", "-1", -1, None)
STATUSES: tuple[str, ...] = (
    "completed",
    "completed",
    "completed",
    "completed",
    "truncated",
    "pending",
    "failed",
)
GROUP_STYLES = ("group_index", "instance_id", "metadata.instance_id", "async_group_id")
TRAJECTORY_FIELDS = ("parent_traj_id", "trajectory_id", "session_id")


def run_length_spans(labels: list[Any]) -> list[dict[str, Any]]:
    """Exact run-length ``version_spans`` of per-token labels (a returning label starts a new run).

    Runs compare labels as JSON values, so ``3``, ``"3"`` and ``"-1"``/``-1`` are separate
    runs; expanding the spans gives back ``labels`` exactly.
    """
    spans: list[dict[str, Any]] = []
    for position, label in enumerate(labels):
        last = spans[-1] if spans else None
        if last is not None and type(last["version"]) is type(label) and last["version"] == label:
            last["end"] = position + 1
        else:
            spans.append({"start": position, "end": position + 1, "version": label})
    return spans


def labels(pool: list[Any]) -> st.SearchStrategy[Any]:
    """A response-token label: mostly from the log's pool of real labels."""
    return st.one_of(st.sampled_from(pool), st.sampled_from(pool), st.sampled_from(NOT_REAL_LABELS))


@st.composite
def group_fields(draw: st.DrawFn, *, style: str, number: int) -> dict[str, Any]:
    """Group id fields of one record, plus lower-precedence decoys that must be ignored."""
    top: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    if style == "group_index":
        # Ids compare as strings: a group_index written as "3" is group 3.
        top["group_index"] = str(number) if draw(st.integers(0, 9)) == 9 else number
        if draw(st.booleans()):
            top["instance_id"] = f"decoy-{draw(st.integers(0, 3))}"
        if draw(st.integers(0, 4)) == 0:
            meta["dressage_return_async_group_id"] = f"decoy-async-{draw(st.integers(0, 3))}"
    elif style == "async_group_id":
        meta["dressage_return_async_group_id"] = f"async-{number}"
        if draw(st.booleans()):
            top["instance_id"] = f"decoy-{draw(st.integers(0, 3))}"
    elif style == "instance_id":
        top["instance_id"] = f"prompt-{number}"
        if draw(st.integers(0, 3)) == 0:
            meta["instance_id"] = f"decoy-{draw(st.integers(0, 3))}"
    else:
        meta["instance_id"] = f"meta-prompt-{number}"
    return {"top": top, "meta": meta}


@st.composite
def segment_fields(draw: st.DrawFn) -> dict[str, Any]:
    """A segment index written in one place: metadata, top level, null, or not at all."""
    value = draw(st.integers(0, 3))
    if value == 0:
        where = draw(st.sampled_from(("meta", "top", "missing", "meta-null", "top-null")))
    else:
        where = draw(st.sampled_from(("meta", "top", "both")))
    if where == "both":
        # metadata.segment_index wins over a different top-level one (docs/semantics.md §1 order).
        return {"top": {"segment_index": draw(st.integers(0, 3))}, "meta": {"segment_index": value}}
    if where == "meta":
        return {"top": {}, "meta": {"segment_index": value}}
    if where == "top":
        return {"top": {"segment_index": value}, "meta": {}}
    if where == "meta-null":
        return {"top": {}, "meta": {"segment_index": None}}
    if where == "top-null":
        return {"top": {"segment_index": None}, "meta": {}}
    return {"top": {}, "meta": {}}


@st.composite
def record_bodies(
    draw: st.DrawFn, *, pool: list[Any], token_mode: str, tokens_always_known: bool
) -> dict[str, Any]:
    """Tokens, token versions, response fields, end version and status of one record."""
    top: dict[str, Any] = {}
    meta: dict[str, Any] = {}

    prompt_length = draw(st.integers(0, 3))
    response_length = draw(st.integers(0, 5))
    total = prompt_length + response_length
    top["tokens"] = draw(st.lists(st.integers(0, 50_000), min_size=total, max_size=total))
    prompt = draw(
        st.lists(st.sampled_from(PROMPT_LABELS), min_size=prompt_length, max_size=prompt_length)
    )
    response = draw(st.lists(labels(pool), min_size=response_length, max_size=response_length))
    loss_mask = draw(
        st.lists(st.sampled_from((0, 1, 1)), min_size=response_length, max_size=response_length)
    )
    full_versions = prompt + response

    if token_mode == "mixed":
        token_mode = draw(st.sampled_from(("full", "spans", "none")))
    if token_mode == "full":
        meta["full_versions"] = full_versions
    elif token_mode == "spans":
        meta["version_spans"] = run_length_spans(full_versions)

    response_field_choices: tuple[str, ...] = ("both", "both", "both", "length", "mask")
    if not tokens_always_known:
        response_field_choices += ("neither",)
    response_fields = draw(st.sampled_from(response_field_choices))
    if response_fields in ("both", "length"):
        top["response_length"] = response_length
    if response_fields in ("both", "mask"):
        top["loss_mask"] = loss_mask

    end_mode = draw(st.sampled_from(("real", "real", "not-real", "missing", "missing", "null")))
    if end_mode == "real":
        meta["dressage_end_token_version"] = draw(st.sampled_from(pool))
    elif end_mode == "not-real":
        meta["dressage_end_token_version"] = draw(
            st.sampled_from(tuple(label for label in NOT_REAL_LABELS if label is not None))
        )
    elif end_mode == "null":
        meta["dressage_end_token_version"] = None

    top["status"] = draw(st.sampled_from(STATUSES))
    top["reward"] = draw(st.sampled_from((0.0, 1.0, -1.0, 0.5)))
    return {"top": top, "meta": meta}


def _merge(*parts: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    for part in parts:
        record.update(part["top"])
        metadata.update(part["meta"])
    record["metadata"] = metadata
    return record


@st.composite
def group_logs(
    draw: st.DrawFn, *, number: int, pool: list[Any], tokens_always_known: bool
) -> list[dict[str, Any]]:
    """The records of one group, trajectory by trajectory, then shuffled."""
    style = draw(st.sampled_from(GROUP_STYLES))
    records: list[dict[str, Any]] = []
    for trajectory in range(draw(st.integers(1, 3))):
        has_id = draw(st.integers(0, 4)) > 0
        # Trajectory ids are strings or integers (an integer 0 and "0" are the same id).
        name: Any = f"t{trajectory}" if draw(st.integers(0, 3)) else trajectory
        token_mode = draw(st.sampled_from(("full", "spans", "mixed", "none")))
        segments = draw(st.integers(1, 3)) if has_id else 1
        for _ in range(segments):
            id_part: dict[str, Any] = {"top": {}, "meta": {}}
            if has_id:
                # Same names in every group: identity is (group id, trajectory id).
                where = draw(st.sampled_from(TRAJECTORY_FIELDS))
                if where == "parent_traj_id":
                    id_part["meta"]["parent_traj_id"] = name
                    if draw(st.integers(0, 3)) == 0:
                        id_part["top"]["trajectory_id"] = f"decoy-{draw(st.integers(0, 3))}"
                elif where == "trajectory_id":
                    id_part["top"]["trajectory_id"] = name
                    if draw(st.integers(0, 3)) == 0:
                        id_part["top"]["session_id"] = f"decoy-{draw(st.integers(0, 3))}"
                else:
                    id_part["top"]["session_id"] = name
            records.append(
                _merge(
                    draw(group_fields(style=style, number=number)),
                    id_part,
                    draw(segment_fields()),
                    draw(
                        record_bodies(
                            pool=pool,
                            token_mode=token_mode,
                            tokens_always_known=tokens_always_known,
                        )
                    ),
                )
            )
    if draw(st.integers(0, 5)) == 5:
        records[-1]["status"] = draw(st.sampled_from(("aborted", "Aborted")))
    # Segments out of order, the aborted record anywhere in the group.
    return draw(st.permutations(records))


@st.composite
def raw_logs(draw: st.DrawFn, real_labels: tuple[Any, ...] = REAL_LABELS) -> list[dict[str, Any]]:
    """A small raw log: 1..MAX_RECORDS record dicts, groups possibly interleaved; the
    real labels drawn from ``real_labels``."""
    pool = draw(st.lists(st.sampled_from(real_labels), min_size=1, max_size=5, unique=True))
    # Either any group may use any label, or groups move through the pool in order, each
    # using a window of one or two neighbouring labels (a run whose weights advance).
    progressing = draw(st.booleans())
    tokens_always_known = draw(st.integers(0, 3)) > 0
    groups = []
    position = 0
    for number in range(draw(st.integers(1, 8))):
        window = pool
        if progressing:
            position = min(len(pool) - 1, position + draw(st.integers(0, 1)))
            window = pool[max(0, position - draw(st.integers(0, 1))) : position + 1]
        groups.append(
            draw(group_logs(number=number, pool=window, tokens_always_known=tokens_always_known))
        )
    records = [record for group in groups for record in group]
    if draw(st.booleans()):
        records = draw(st.permutations(records))
    records = records[:MAX_RECORDS]
    for index, record in enumerate(records):
        record["index"] = index
    return records
