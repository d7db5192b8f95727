"""Writing outputs safely: a temporary file or folder beside the target, renamed when
complete, and the leftovers of writes that were killed removed by the next write."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from analysis.errors import OutputError
from analysis.output.checks import check_folder

NO_TMPFILE_ENV = "DRESSAGE_REPLAY_NO_TMPFILE"
"""When set (not empty), :func:`atomic_path` writes a named temporary even where the
system offers anonymous ones (to test the fallback)."""
use_tmpfile = True
"""Whether :func:`atomic_path` may write an anonymous ``O_TMPFILE`` (tests turn it off)."""


class LeftoverRemovedWarning(UserWarning):
    """A temporary left beside an output by a write that was killed, removed by the next
    write of that output (the command line prints it as a ``warning:`` line)."""


@functools.cache
def _here() -> str:
    """8 hex digits that tell this machine, boot and process namespace apart: a pid means
    something only there. A container sharing the folder, or another host on shared
    storage, sees a live writer's pid as gone; its temporaries carry another tag, so they
    are never taken for leftovers here."""
    parts = [socket.gethostname()]
    with contextlib.suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    with contextlib.suppress(OSError):
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:8]


def _temp_name(path: Path) -> str:
    """A temporary's name beside ``path``: ``.NAME.<pid>-<here>-XXXXXXXX.tmp``, the pid of
    the process that writes it and where that pid means something (:func:`_here`): a
    later write from the same place removes it once that process is gone."""
    return f".{path.name}.{os.getpid()}-{_here()}-{secrets.token_hex(4)}.tmp"


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs (or may: one of another user's, or past the range;
    any, where signal 0 does not ask, off POSIX)."""
    if pid == os.getpid() or os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def _ours(name: str) -> bool:
    """Whether ``name`` is a temporary of this process (a folder being written)."""
    found = re.fullmatch(r"\..+\.([0-9]{1,10})-([0-9a-f]{8})-[0-9a-f]{8}\.tmp", name)
    return found is not None and int(found.group(1)) == os.getpid() and found.group(2) == _here()


def remove_leftovers(path: Path) -> list[Path]:
    """Remove the temporaries of ``path`` (``.NAME.<pid>-<here>-XXXXXXXX.tmp``, files or
    folders) written on this machine and in this process namespace (:func:`_here`) whose
    writing process is gone: a write killed (``kill -9``, the OOM killer) left them.
    Nothing else is touched, not even another output's temporaries, nor those written
    from elsewhere (whose pids mean nothing here); each removal is said as a
    :class:`LeftoverRemovedWarning`."""
    path = Path(path)
    removed: list[Path] = []
    if _ours(path.parent.name):
        return removed  # a file of a folder this process is writing: nothing left there
    pattern = re.compile(rf"\.{re.escape(path.name)}\.([0-9]{{1,10}})-{_here()}-[0-9a-f]{{8}}\.tmp")
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed  # the write says why it cannot write there
    for entry in entries:
        found = pattern.fullmatch(entry.name)
        if found is None or _alive(int(found.group(1))):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            continue  # gone already (another write removed it), or not ours to remove
        removed.append(Path(entry.path))
    if removed:
        warnings.warn(
            f"{path}: removed {', '.join(item.name for item in removed)}, left half-written "
            "beside it by an earlier write that was killed (its process is gone)",
            LeftoverRemovedWarning,
            stacklevel=3,
        )
    return removed


def _anonymous_file(directory: Path) -> int | None:
    """A descriptor of a new file in ``directory`` that has no name (Linux's O_TMPFILE):
    it vanishes with the process, whatever ends it. None where the system or the folder's
    filesystem has none (the caller then writes a named temporary)."""
    flag = getattr(os, "O_TMPFILE", 0)
    if not (flag and use_tmpfile and os.path.isdir("/proc/self/fd")):
        return None
    if os.environ.get(NO_TMPFILE_ENV):
        return None
    try:
        # 0o666 with the umask applied: the permissions a plain open() gives.
        return os.open(directory, flag | os.O_RDWR, 0o666)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return None
        raise


def _publish(handle: int, path: Path) -> None:
    """Give the anonymous file ``handle`` a temporary name beside ``path``, then rename it
    over ``path`` (a name of its own first: a link cannot replace a file)."""
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            name = _temp_name(path)
            try:
                # A target folder makes this linkat(..., AT_SYMLINK_FOLLOW): plain link()
                # would link /proc's magic link itself, not the file it stands for.
                os.link(f"/proc/self/fd/{handle}", name, dst_dir_fd=folder, follow_symlinks=True)
                break
            except FileExistsError:
                continue
        try:
            os.replace(name, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder)
            raise
    finally:
        os.close(folder)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only on success.

    On Linux the temporary is an anonymous file (``O_TMPFILE``) written through its
    ``/proc/self/fd/N`` path, so that nothing is left if the process is killed; elsewhere,
    or where the folder's filesystem has none, a file ``.NAME.<pid>-<here>-XXXXXXXX.tmp``, which
    the next write of ``path`` removes if a kill left it (:func:`remove_leftovers`).
    """
    path = Path(path)
    directory = check_folder(path)
    remove_leftovers(path)
    try:
        handle = _anonymous_file(directory)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write there ({exc.strerror})") from exc
    if handle is None:
        with _named_temporary(path, directory) as temp:
            yield temp
        return
    try:
        yield Path(f"/proc/{os.getpid()}/fd/{handle}")
        _publish(handle, path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror})") from exc
    finally:
        os.close(handle)


def _make_named(path: Path, directory: Path, make: Callable[[Path], None]) -> Path:
    """A new temporary beside ``path``, made by ``make`` (a file or a folder)."""
    while True:
        temp = directory / _temp_name(path)
        try:
            make(temp)
            return temp
        except FileExistsError:
            continue
        except OSError as exc:
            raise OutputError(
                f"{path}: cannot write there ({exc.strerror}); choose a writable folder"
            ) from exc


def _new_file(temp: Path) -> None:
    # 0o666 with the umask applied: the permissions a plain open() gives.
    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


@contextlib.contextmanager
def _named_temporary(path: Path, directory: Path) -> Iterator[Path]:
    temp = _make_named(path, directory, _new_file)
    try:
        yield temp
        os.replace(temp, path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror})") from exc
    finally:
        with _no_interrupts():
            temp.unlink(missing_ok=True)


def temporary_folder(path: Path) -> Path:
    """A new folder ``.NAME.<pid>-<here>-XXXXXXXX.tmp`` beside ``path``, to be renamed to it when
    whole (first removing the ones killed writes of ``path`` left: :func:`remove_leftovers`);
    its permissions are a plain mkdir()'s."""
    path = Path(path)
    remove_leftovers(path)
    return _make_named(path, check_folder(path), os.mkdir)


@contextlib.contextmanager
def atomic_folder(path: Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; rename it to ``path`` only on success.

    ``path`` must not exist, or be an empty folder: a run is never mixed into another's
    files, and an interrupted write leaves nothing behind (a kill leaves the folder
    ``.NAME.<pid>-<here>-XXXXXXXX.tmp``, which the next write of ``path`` removes).
    """
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        kind = "a folder that is not empty" if path.is_dir() else "a file"
        raise OutputError(f"{path}: already exists and is {kind}; choose a new folder")
    temp = temporary_folder(path)
    try:
        # Held open, the folder keeps its inode: one removed and made again differs.
        held = os.open(temp, os.O_RDONLY)
        try:
            yield temp
            _check_same_folder(path, temp, os.fstat(held))
        finally:
            os.close(held)
        if path.exists():
            path.rmdir()
        os.replace(temp, path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror})") from exc
    finally:
        with _no_interrupts():  # a second Ctrl-C would leave the folder half removed
            if temp.exists():
                shutil.rmtree(temp, ignore_errors=True)


@contextlib.contextmanager
def set_aside(path: Path) -> Iterator[None]:
    """An output that exists (a file or a folder), moved aside while its replacement is
    written: removed once the block ends well, put back when it fails (the command
    line's ``--force``; a folder is never written into another's files)."""
    path = Path(path)
    if not path.exists():
        yield
        return
    aside = path.with_name(f".{path.name}.replaced-{os.getpid()}")
    try:
        os.replace(path, aside)
    except OSError as exc:
        raise OutputError(f"{path}: cannot move it aside to replace it ({exc.strerror})") from exc
    try:
        yield
    except BaseException:
        with _no_interrupts(), contextlib.suppress(OSError):
            if not path.exists():
                os.replace(aside, path)
        raise
    with _no_interrupts():
        if aside.is_dir() and not aside.is_symlink():
            shutil.rmtree(aside, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                aside.unlink()


@contextlib.contextmanager
def _no_interrupts() -> Iterator[None]:
    """Ctrl-C ignored for the clean-up in the block (the main thread only can set it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _check_same_folder(path: Path, temp: Path, made: os.stat_result) -> None:
    """Refuse to publish a temporary folder that was removed while it was written (and
    perhaps made again, partly, by a writer's ``mkdir(parents=True)``)."""
    try:
        now = temp.stat()
    except OSError:
        now = None
    if now is None or made.st_nlink == 0 or (now.st_ino, now.st_dev) != (made.st_ino, made.st_dev):
        raise OutputError(
            f"{path}: its temporary folder {temp.name} was removed while it was being "
            "written, so what it holds is not whole; nothing was written, run again"
        )
