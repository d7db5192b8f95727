"""Find the logs among the inputs: files, folders and globs, each with the format it is read as."""

from __future__ import annotations

import glob
import operator
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.errors import (
    Explained,
    InputNotFoundError,
    Message,
    ReplayError,
    UnknownFormatError,
    counted,
    setting,
)
from analysis.formats.dressage.artifacts import is_artifact_folder, is_run_tree
from analysis.formats.dressage.format import FORMAT as ARTIFACTS
from analysis.formats.jsonl.format import FORMAT as JSONL
from analysis.formats.peer_records import numbered_files
from analysis.formats.peers import PeerFormat
from analysis.formats.registry import BY_NAME, PEERS, named
from analysis.formats.slime_dumps.reader import is_eval_dump
from analysis.formats.source import Source
from analysis.formats.text.jsonl import jsonl_records
from analysis.formats.text.lean import lean_plan
from analysis.table.fieldmap import FieldMap
from analysis.table.limits import check_regular, is_pipe


def detect_sources(
    inputs: Sequence[str | Path], *, include_eval: bool = False, log_format: str | None = None
) -> tuple[list[Source], list[str]]:
    """Expand inputs (files, directories, globs) into sources in arrival order, plus warnings.

    A folder's evaluation dumps (``eval_<N>.pt``) are left out unless ``include_eval``
    (a warning names them); a file given by name is always read. ``log_format`` (one of
    :data:`analysis.formats.registry.NAMES`) reads every file given, and every JSONL file of a
    folder, as that
    format instead of the one found."""
    sources: list[Source] = []
    warnings: list[str] = []
    for raw in inputs:
        path = Path(raw)
        try:
            exists, is_dir = path.exists(), path.is_dir()
        except OSError as exc:  # a folder on the way that may not be searched
            raise InputNotFoundError(
                f"{raw}: cannot reach it ({exc.strerror}); check the permissions of its folders"
            ) from exc
        if not exists:
            pattern = str(raw)
            matches = (
                sorted(map(Path, glob.glob(pattern))) if any(c in pattern for c in "*?[") else []
            )
            if not matches:
                raise InputNotFoundError(f"{raw}: no such file or directory; check the path")
            for match in matches:
                found, more = detect_sources(
                    [match], include_eval=include_eval, log_format=log_format
                )
                sources += found
                warnings += more
            continue
        if is_dir:
            found, more = _eval_apart(
                path, *_directory_sources(path, log_format), include_eval=include_eval
            )
            sources += found
            warnings += more
        else:
            sources.append(Source(path, _chosen(log_format) or read_as(path)))
    return sources, warnings


def _chosen(log_format: str | None) -> str | None:
    told = named(log_format)
    return None if told is None else told.name


def read_as(path: Path) -> str:
    """The format a file is read as: by name and content, and a JSONL file whose first
    record has the shape of another system's log as that system's (:func:`peer_of_file`)."""
    found = file_format(path)
    if found == JSONL.name and not is_pipe(path):  # a pipe is read once: never probed
        return peer_of_file(path) or found
    return found


ARTIFACT_TREE = "artifacts"
"""The kind a Dressage artifact tree stands as among a folder's kinds of log."""


def _folder_kinds() -> list[tuple[str, tuple[str, ...]]]:
    """The kinds of file a folder's logs are looked for as, in the order they are
    preferred, each with its (lower-case) name endings; the artifact tree in its place."""
    ranks: dict[str, int] = {ARTIFACT_TREE: ARTIFACTS.folder_rank}
    endings: dict[str, tuple[str, ...]] = {ARTIFACT_TREE: ()}
    for fmt in BY_NAME.values():
        if fmt.folder_kind is not None:
            ranks[fmt.folder_kind] = min(
                ranks.get(fmt.folder_kind, fmt.folder_rank), fmt.folder_rank
            )
            endings[fmt.folder_kind] = endings.get(fmt.folder_kind, ()) + fmt.endings
    return [(kind, endings[kind]) for kind in sorted(ranks, key=ranks.__getitem__)]


def _folder_files(root: Path) -> tuple[dict[str, list[Path]], list[str]]:
    """A folder's log files by kind (in name order), and the names of links to logs that
    are not there."""
    try:
        # By name: the same order as sorting the paths, without making a Path of each of
        # what may be thousands of instance folders (that sort alone took 27 ms for 5,000).
        with os.scandir(root) as listing:
            entries = sorted(listing, key=operator.attrgetter("name"))
    except OSError as exc:
        raise InputNotFoundError(
            f"{root}: cannot list the folder ({exc.strerror}); check its permissions"
        ) from exc
    kinds = [(kind, endings) for kind, endings in _folder_kinds() if endings]
    found: dict[str, list[Path]] = {kind: [] for kind, _ in kinds}
    broken: list[str] = []
    try:
        for entry in entries:
            name = entry.name.lower()
            for kind, endings in kinds:
                if not name.endswith(endings):
                    continue
                path = root / entry.name
                if entry.is_file():  # (the listing's own type: no system call for most)
                    found[kind].append(path)
                elif path.is_symlink() and not path.exists():
                    broken.append(entry.name)
                else:
                    continue
                break
    except OSError as exc:  # listed, but its entries may not be looked at
        raise InputNotFoundError(
            f"{root}: cannot look at the folder's files ({exc.strerror}); check its permissions"
        ) from exc
    return found, broken


def _directory_sources(root: Path, log_format: str | None = None) -> tuple[list[Source], list[str]]:
    """A folder's logs: another system's rollouts tree (:func:`peer_tree`), else
    what :func:`_dressage_or_slime_sources` finds."""
    if (tree := peer_tree(root, log_format)) is not None:
        kind, paths, note = tree
        chosen_format = _chosen(log_format) or kind
        return [Source(path, chosen_format) for path in paths], [note]
    return _dressage_or_slime_sources(root, log_format)


def run_folder_read_as_log(root: Path) -> Explained:
    """What a run folder read as one log is, in one short line, with the detail behind it
    (said by every command that reads it so: it is not the run's own loop)."""
    return Explained(
        f"{root}: a Dressage run folder, read as one log on the simple loop here, not on its "
        "own loop",
        detail=f"{root}: its traj_payload/ and traj_err/ are read as one log (every attempt, "
        "in completion order when its records carry it) for the simple loop of "
        "docs/semantics.md §3 (policies, --format artifacts, the log's facts); settings of K "
        "(replay, sweep, plot, report, compare, verify) are replayed as Dressage's own loop "
        "runs (§12)",
    )


def _dressage_or_slime_sources(
    root: Path, log_format: str | None
) -> tuple[list[Source], list[str]]:
    """A folder's logs: a Dressage run folder's artifact trees, else its slime dumps, else
    its Dressage artifact tree, else its JSONL files, else its Parquet/Arrow files. Logs of
    a later kind beside them are not read (runs keep one kind of log), with a warning that
    names them."""
    if is_run_tree(root):
        return [Source(root, ARTIFACTS.name, folder=True)], [run_folder_read_as_log(root)]
    found, broken = _folder_files(root)
    artifacts = is_artifact_folder(root)
    chosen: list[Source] = []
    what = ""
    unread: list[str] = []
    for kind, _ in _folder_kinds():
        if kind == ARTIFACT_TREE:
            if artifacts and chosen:
                unread.append("a Dressage artifact tree")
            elif artifacts:
                # Its files are found, ordered and read together (analysis.formats.dressage.artifacts).
                chosen = [Source(root, ARTIFACTS.name, folder=True)]
                what = "the artifact tree"
            continue
        paths = found.get(kind, [])  # (a kind declared without endings has no files)
        if paths and chosen:
            names = ", ".join(path.name for path in paths[:3]) + (", ..." if paths[3:] else "")
            unread.append(f"{counted(len(paths), kind + ' file')} ({names})")
        elif paths:
            # slime dumps are put in trainer-step order once read (order_dumps).
            chosen = [Source(path, file_format(path)) for path in paths]
            if kind == JSONL.folder_kind:
                chosen, left = _jsonl_sources(paths, _chosen(log_format))
                unread += [_named(left, "other JSONL file")] if left else []
            what = f"the {kind} file" if len(chosen) == 1 else f"the {len(chosen)} {kind} files"
    if not chosen:
        raise UnknownFormatError(
            f"{root}: a directory with no slime dumps (*.pt), no Dressage artifacts "
            "(<instance>/<session>/samples/<segment>.json), no *.jsonl and no *.parquet"
            + (f" (only links to files that are not there: {', '.join(broken)})" if broken else "")
            + "; point at the run's log folder or files"
        )
    warnings = []
    if broken:
        warnings.append(
            f"{root}: not read, as the files they link to are not there: {', '.join(broken)}"
        )
    if unread:
        warnings.append(
            f"{root}: read {what} only; also there and not read: {'; '.join(unread)} "
            "(pass those files explicitly to read them too, unless they hold the same run)"
        )
    return chosen, warnings


def _jsonl_sources(paths: list[Path], log_format: str | None) -> tuple[list[Source], list[Path]]:
    """A folder's JSONL files: another system's log (:func:`peer_files`) in that
    system's order, with the files beside it that are not part of it; else plain JSONL in
    name order."""
    told = None if log_format is None else BY_NAME[log_format]
    peer = None if told not in (None, *PEERS) else peer_files(paths, log_format)
    if peer is not None:
        name, read, left = peer
        return [Source(path, name) for path in read], left
    return [Source(path, log_format or JSONL.name) for path in paths], []


def _named(paths: list[Path], kind: str) -> str:
    names = ", ".join(path.name for path in paths[:3]) + (", ..." if paths[3:] else "")
    return f"{counted(len(paths), kind)} ({names})"


def _eval_apart(
    root: Path, sources: list[Source], warnings: list[str], *, include_eval: bool
) -> tuple[list[Source], list[str]]:
    """A folder's sources without its evaluation dumps, unless ``include_eval``: their
    samples are not training data, and counted among the steps' groups they would be
    replayed as extra groups."""
    evals = [s for s in sources if not s.folder and is_eval_dump(s.path)]
    if include_eval or not evals:
        return sources, warnings
    names = ", ".join(s.path.name for s in evals[:3]) + (", ..." if evals[3:] else "")
    if len(evals) == len(sources):
        raise UnknownFormatError(
            Message(
                f"{root}: holds only evaluation dumps ({names}); pass "
                + setting("include_eval", True)
                + " to read them as a log of their own"
            )
        )
    note = Message(
        f"{root}: {counted(len(evals), 'evaluation dump')} ({names}) not read, so that "
        "evaluation samples are not taken for training groups; pass "
        + setting("include_eval", True)
        + " "
        "to read them as groups of their own (ids eval:<rollout_id>:<instance or index>)"
    )
    return [s for s in sources if s not in evals], [*warnings, note]


def file_format(path: Path) -> str:
    """The format a file is read as by its name, else by its first bytes."""
    name = path.name.lower()
    for fmt in BY_NAME.values():
        if fmt.endings and name.endswith(fmt.endings):
            return fmt.name
    if is_pipe(path):
        return JSONL.name  # read once, as JSONL, gzipped or not (told apart as it is read)
    check_regular(path)  # a device would be sniffed, and might never end
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
    except OSError:
        # Reading it will fail the same way, and say so where --on-bad-record skip applies.
        return JSONL.name
    for fmt in BY_NAME.values():
        if fmt.sniff(head):
            return fmt.name
    raise UnknownFormatError(
        f"{path}: unknown format (not JSONL, Parquet, Arrow IPC, or a slime .pt dump); "
        "give the file a .jsonl, .parquet, .arrow or .pt extension if it is one of those"
    )


# --------------------------------------------------------------------------- other systems


def peer_of_record(record: Any) -> str | None:
    """The system whose record shape this is (every key its writer always writes is
    there), else None."""
    if not isinstance(record, dict):
        return None
    keys = record.keys()
    for fmt in PEERS:
        if fmt.keys <= keys:
            return fmt.name
    return None


_PROBED_MEMBERS = 1000
"""Members of a gzip file looked through for its first record (a file of one member per
record has it in the first; one of millions of empty members took seconds a reading)."""


def peer_of_file(path: Path) -> str | None:
    """The system whose log a JSONL file is, by its first record; None when it is no
    other system's (or cannot be read: its reader will say why)."""
    try:
        # Lean: a long first line's token lists are not kept, nor folded, to read its keys.
        lean = lean_plan(FieldMap(), fold=False)
        for _, record in jsonl_records(path, lean=lean, members=_PROBED_MEMBERS):
            return peer_of_record(record)
    except ReplayError:  # reading it again will report the problem
        return None
    return None


def peer_files(
    paths: list[Path], log_format: str | None
) -> tuple[str, list[Path], list[Path]] | None:
    """A folder's JSONL files as one system's log: the system (``log_format``, else the
    one whose file names and first record fit), its files in arrival order, and the
    files left out as not named as that system names them; None when they are no other
    system's log."""
    peer = named(log_format)
    if peer is None:
        for fmt in PEERS:
            if not fmt.names_files or fmt.file_order is None:
                continue
            order = fmt.file_order
            named_paths = [path for path in paths if order(path) is not None]
            if named_paths and peer_of_file(named_paths[0]) == fmt.name:
                peer = fmt
                break
        else:
            peer = BY_NAME.get(peer_of_file(paths[0]) or "")
    if not isinstance(peer, PeerFormat) or peer.file_order is None:
        return None
    order = peer.file_order
    kept = [path for path in paths if not peer.names_files or order(path) is not None]
    if not kept:  # told the format, with files named otherwise: read them all
        kept = paths
    left = [path for path in paths if path not in kept]
    return peer.name, numbered_files(kept, order), left


def peer_tree(root: Path, log_format: str | None = None) -> tuple[str, list[Path], str] | None:
    """A folder laid out as another system lays out its log (prime-rl's ``rollouts/``,
    AReaL's ``rollout/``, or read as ``log_format`` areal): its format, the files read in
    arrival order, and a note of what was read (else None). Only names are listed: a
    Dressage folder of thousands of instance folders is not walked. A folder that may not
    be listed is none of these here: the reader of our own folders says what is wrong
    with it."""
    try:
        for fmt in PEERS:
            if fmt.tree is not None and (found := fmt.tree(root, log_format, peer_of_file)):
                paths, note = found
                return fmt.name, paths, note
    except OSError:
        return None
    return None
