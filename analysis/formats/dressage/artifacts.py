"""Read a Dressage artifact folder (``<instance>/<session>/samples/<segment>.json``) quickly.

A run writes one small JSON file per segment, so a folder holds tens of thousands of
them, and reading it is bound by opening, parsing and mapping files one at a time in
Python. Two things make it faster than a plain loop:

- the session folders are shared with one helper process, which uses the second
  core. The helper is a fresh interpreter started with ``-c`` that imports only the
  record mapping (:mod:`analysis.formats.fields`, no polars): it never runs the caller's
  script, so a script without a ``__main__`` guard is safe, and it starts in well
  under a tenth of a second. The folders are handed out as they are read: this
  process takes them one at a time from the front of the list, the helper a batch at
  a time from the back whenever it is ready for more, so neither waits for the other
  however the two cores are shared out by the host. The helper hands its rows back as
  columns with :mod:`marshal` (plain data only; nothing is unpickled), a few thousand
  files at a time, which this process takes as they come. If it cannot start or
  fails, this process reads what it left. ``DRESSAGE_REPLAY_HELPERS=0`` turns it off.
- files are read with plain os calls, and the cyclic garbage collector is paused while
  results pile up (they hold no cycles), which otherwise rescans them again and again.

The caller puts the records in arrival order once all are read: completion time when
every record carries it, else modification time, then path (docs/semantics.md §5.1);
the last file read may be the first to arrive.
"""

from __future__ import annotations

import array
import collections
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from analysis.errors import (
    Message,
    counted,
    setting,
)
from analysis.formats.dressage import artifact_helper, segments
from analysis.formats.dressage.segments import (
    Chunk,
    FileResult,
    collector_paused,
    directories,
    read_session,
    session_files,
)
from analysis.table.fieldmap import FieldMap
from analysis.table.limits import DEFAULT_LIMITS, Limits


def is_artifact_folder(root: Path) -> bool:
    """Whether ``root`` holds at least one ``<instance>/<session>/samples/<n>.json`` (a
    completed trajectory) or ``<instance>/<session>/error.json`` (a failed one)."""
    return any(
        session_files(session, [])
        for instance in instance_folders(root, [])
        for session in directories(instance, [])
    )


RUN_TREES = ("traj_payload", "traj_err")
"""The artifact trees of a Dressage run folder: completed and failed trajectories."""


def is_run_tree(root: Path) -> bool:
    """Whether ``root`` holds a Dressage run's artifact trees (False where it cannot be
    looked into: reading it then says why)."""
    return any(os.path.isdir(root / tree) for tree in RUN_TREES)


def instance_folders(root: Path, problems: list[FileResult]) -> list[str]:
    """The instance folders of an artifact tree; of a run folder, those of both its trees
    (``traj_payload/``, ``traj_err/``), read together so that arrival order covers both."""
    trees = [root / tree for tree in RUN_TREES if os.path.isdir(root / tree)]
    if not trees:
        return directories(str(root), problems)
    return [instance for tree in trees for instance in directories(str(tree), problems)]


def read_artifact_folder(
    root: Path,
    *,
    fields: FieldMap,
    extra: Sequence[str] = (),
    on_chunk: Callable[[Chunk], None],
    progress: Callable[[int, int], None] | None = None,
    tie_warnings: list[str] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[int, list[str]]:
    """Read every segment file below ``root``; return how many there were, and warnings.

    The warning that files share a modification time goes to ``tie_warnings`` when given
    (the caller knows whether the files are ordered by it).

    A file past ``max_record_bytes`` is refused unread, a record past ``max_spans``
    is a bad record (``limits``).
    The results go to ``on_chunk`` a few thousand files at a time, in no particular
    order: the caller puts them in arrival order (completion time, else modification
    time, then path) once all are read, since the last file read may be the first to
    arrive. Folders that
    cannot be listed and files that cannot be read come as entries with an error, in
    place of rows. ``progress(done, total)`` counts session folders.
    """
    problems: list[FileResult] = []
    # The unit of work is a session folder: a run has few instance folders (prompts), each
    # of many sessions, so instance folders would leave the helper nothing to share.
    instances = sorted(
        session
        for instance in instance_folders(root, problems)
        for session in directories(instance, problems)
    )
    warnings: list[str] = []
    stamps = array.array("q")

    def take(chunk: Chunk) -> None:
        stamps.extend(chunk.file_stamps)
        on_chunk(chunk)

    def read(results: list[FileResult]) -> None:
        take(Chunk.of(results, extra))
        if helper is not None:  # the helper's chunks that came meanwhile
            for chunk in helper.arrived():
                take(chunk)

    def tick(mine: int) -> None:
        if progress is not None:
            progress(mine + (helper.instances_done if helper is not None else 0), len(instances))

    helper: artifact_helper.HelperProcess | None = None
    with collector_paused():
        pending = collections.deque(instances)
        try:
            if artifact_helper.helper_wanted(instances):
                helper = artifact_helper.HelperProcess(pending, fields, extra, limits)
            read_shard(_taken(pending), fields, extra, on_chunk=read, tick=tick, limits=limits)
            if helper is not None:
                warnings += _finish_helper(helper, root, fields, extra, read, take, limits)
        finally:
            if helper is not None:
                helper.stop()
        if problems:
            read(problems)
    if progress is not None:
        progress(len(instances), len(instances))
    (warnings if tie_warnings is None else tie_warnings).extend(_tie_warning(stamps))
    return len(stamps), warnings


def _taken(pending: collections.deque[str]) -> Iterator[str]:
    """Instance folders taken one at a time from the front, while any are left."""
    while True:
        try:
            yield pending.popleft()  # atomic: the helper's feeder takes from the back
        except IndexError:
            return


def _finish_helper(
    helper: artifact_helper.HelperProcess,
    root: Path,
    fields: FieldMap,
    extra: Sequence[str],
    read: Callable[[list[FileResult]], None],
    take: Callable[[Chunk], None],
    limits: Limits,
) -> list[str]:
    """Take the helper's last chunks; read what a failed helper left, and say so."""
    helper.no_more()  # none are left: its input ends, whatever it reports
    for chunk in helper.rest():
        take(chunk)
    if not helper.problem:
        return []
    # Its chunks so far stand; this process reads the folders it left.
    left = helper.unfinished()
    read_shard(left, fields, extra, on_chunk=read, limits=limits)
    return [
        f"{root}: the helper process failed ({helper.problem}); "
        + (
            f"this process read the {counted(len(left), 'session folder')} it left"
            if left
            else "this process read every session folder"
            if not helper.assigned
            else "all its results had come"
        )
    ]


def _tie_warning(stamps: Sequence[int]) -> list[str]:
    """A warning when files share a modification time, as their order then falls back."""
    # (Counted only when some are tied: a groupby over the sorted times took 20 ms for
    # 20,000 files, at the end of the load, when the helper process is done.)
    if len(set(stamps)) == len(stamps):
        return []
    tied = sum(count for count in collections.Counter(stamps).values() if count > 1)
    return [
        Message(
            f"{tied} of {len(stamps)} artifact files share a modification time with "
            "another, so their arrival order falls back to path order (as after a plain "
            "copy); pass " + setting("order_by") + " with a completion-time field if the log "
            "has one"
        )
    ]


def read_shard(
    instances: Iterable[str],
    fields: FieldMap,
    extra: Sequence[str],
    *,
    on_chunk: Callable[[list[FileResult]], None],
    tick: Callable[[int], None] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> None:
    """Read every file of the given session folders, in no particular order.

    Results go to ``on_chunk`` every :data:`CHUNK_FILES` files or so, at the end of a
    session folder. ``tick(n)`` is called after the n-th session folder.
    """
    results: list[FileResult] = []
    for done, instance in enumerate(instances, start=1):
        read_session(instance, fields, extra, results, limits)
        if len(results) >= segments.CHUNK_FILES:
            on_chunk(results)
            results = []
        if tick is not None:
            tick(done)
    if results:
        on_chunk(results)
