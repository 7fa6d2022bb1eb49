"""Where a run keeps its transcripts and child logs: ``.isoagent/runs/<run-id>/`` in the
workspace, or a folder chosen (``--run-dir``), or the user's state folder."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import secrets
import stat
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from io import FileIO
from pathlib import Path
from typing import Protocol

import msgspec

from isoagent.parent.records.events import Event

_encoder = msgspec.json.Encoder()


# the folders a run's files live in are only ever opened relative to their parent's fd,
# never by a path: a child that replaced one with a symbolic link gets ELOOP, not our files
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
RUNS = Path(".isoagent") / "runs"  # a workspace's, by default
RUN_DIR_VARIABLE = "ISOAGENT_RUN_DIR"


def runs_dir_for(workdir: Path, chosen: str | Path | None = None) -> tuple[Path, bool]:
    """Where the runs of ``workdir`` go, and whether that is the fallback: ``chosen``
    (``--run-dir``), else ``$ISOAGENT_RUN_DIR``, else the project's ``.isoagent/runs``
    (``project_root``: from a sub-folder, the project's runs), else, when that cannot be
    made there (a read-only workspace), ``state_runs()``. No link on the way is resolved:
    a child may have planted it (``open_base``)."""
    chosen = chosen or os.environ.get(RUN_DIR_VARIABLE)
    if chosen:
        return Path(os.path.abspath(os.path.expanduser(chosen))), False
    default = project_root(workdir) / RUNS
    if _can_make(default):
        return default, False
    return state_runs(), True


def project_root(workdir: Path) -> Path:
    """The folder whose ``.isoagent`` keeps ``workdir``'s runs, as git finds a repository:
    the nearest of ``workdir`` and the folders above it that holds an ``.isoagent`` folder
    or a ``.git`` (a folder, or a worktree's file) of this user's; ``workdir`` itself when
    none does. No project spans the home, a folder anyone may write (``/tmp``) or ``/``:
    the walk stops below them (a dotfiles ``~/.git``, or an ``.isoagent`` a run once left in
    ``/tmp``, must not gather every scratch folder's runs), and a marker of another user's
    is passed over, as git's safe.directory refuses it."""
    home = Path(os.path.realpath(Path.home()))
    for folder in (workdir, *workdir.parents):
        if folder != workdir and (folder == home or _shared(folder)):
            break
        if folder == folder.parent:
            break
        if any(_own_marker(folder / name) for name in (".isoagent", ".git")):
            return folder
    return workdir


def _shared(folder: Path) -> bool:
    try:
        return bool(os.stat(folder).st_mode & stat.S_IWOTH)
    except OSError:
        return True


def _own_marker(path: Path) -> bool:
    try:
        found = os.lstat(path)
    except OSError:
        return False
    kind = stat.S_IFMT(found.st_mode)
    return found.st_uid == os.geteuid() and (
        kind == stat.S_IFDIR or (kind == stat.S_IFREG and path.name == ".git")
    )


def state_runs() -> Path:
    """Runs in the user's state folder: ``state_dir() / "runs"``."""
    return state_dir() / "runs"


def state_dir() -> Path:
    """What isoagent keeps for this user, out of every workspace (earlier runs of read-only
    workspaces, the key that seals runs, the workspace trust record):
    ``$XDG_STATE_HOME/isoagent``, by default ``~/.local/state/isoagent`` (a relative
    ``XDG_STATE_HOME`` is ignored, as the XDG specification says). The home's path is made
    real, as the workspace's is, so that ``open_base`` sees a workspace that holds the state
    folder; nothing below it is resolved. No sandboxed child reads it
    (``sandbox_policy.hidden_paths``)."""
    return _state_dir(os.environ.get("XDG_STATE_HOME", ""), str(Path.home()))


@functools.lru_cache(maxsize=4)  # asked for each child (sandbox_policy): a realpath is 25 us
def _state_dir(state: str, home: str) -> Path:
    base = Path(state) if os.path.isabs(state) else Path(os.path.realpath(home), ".local", "state")
    return base / "isoagent"


def open_state_dir() -> int:
    """The state folder as a directory fd, as ``open_base`` opens a run folder's base: no
    link below the home (or ``$XDG_STATE_HOME``'s parent) followed."""
    return open_base(state_dir(), (Path(os.path.realpath(Path.home())),))


def _can_make(folder: Path) -> bool:
    """Whether this process may write in ``folder``, or in the nearest existing folder
    above it (permissions, a read-only mount)."""
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    return os.access(folder, os.W_OK | os.X_OK, effective_ids=True)


@dataclass
class RunFolder:
    """A run's folder, mode 0700, held open from its creation: every file is created
    in it through that descriptor, new (``O_EXCL``), never through a link, mode 0600."""

    path: Path
    run_id: str
    fd: int = -1

    @classmethod
    def create(cls, base: Path, reach: Sequence[Path] = ()) -> RunFolder:
        """A new run folder in ``base``; ``reach``: as ``open_base`` says."""
        run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
        parent = open_base(base, reach)
        try:
            os.mkdir(run_id, 0o700, dir_fd=parent)
            fd = os.open(run_id, _DIRECTORY, dir_fd=parent)
        finally:
            os.close(parent)
        return cls(base / run_id, run_id, fd)

    def create_file(self, name: str) -> FileIO:
        """A new file ``name`` in the run folder, open for writing."""
        return FileIO(os.open(name, _NEW_FILE, 0o600, dir_fd=self.fd), "wb")

    def scratch_file(self, name: str) -> FileIO:
        """A new file for writing and reading back, nameless in the run folder once made
        (``name`` is unlinked at once): it goes when it is closed, or the process ends."""
        fd = os.open(name, _NEW_FILE & ~os.O_WRONLY | os.O_RDWR, 0o600, dir_fd=self.fd)
        try:
            os.unlink(name, dir_fd=self.fd)
        except OSError:
            os.close(fd)
            raise
        return FileIO(fd, "r+b")

    def opener(self, path: Path) -> Callable[[], FileIO]:
        """What creates ``path`` (a file of this run folder): for a writer to call."""
        return lambda: self.create_file(path.name)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def child_stem(self, index: int, agent: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in agent)
        return self.path / f"child-{index:03d}-{safe}"

    def display(self, path: Path) -> str:
        """A path as the user will want to see it: relative to the cwd when below it."""
        cwd = Path.cwd()
        return str(path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path)


def open_base(base: Path, reach: Sequence[Path] = ()) -> int:
    """``base`` as a directory fd: its folders below the one it is opened from made 0700
    where missing and opened without following a link, from its parent's parent
    (``.isoagent/runs``), or from the folder of ``reach`` (the children's workspace and
    added folders, real paths) that holds it: a child may have replaced any folder below
    with a link (``~/.local/state``, when the workspace is the home) to get the next run's
    files. ``.isoagent`` gets a ``.gitignore`` of ``*`` so git status stays clean."""
    base = Path(os.path.abspath(base))
    holders = [folder for folder in reach if base.is_relative_to(folder)]
    anchor = min(holders, key=lambda folder: len(folder.parts), default=None)
    if anchor is None:
        anchor = base.parents[1] if len(base.parts) > 2 else Path(base.anchor)
    anchor.mkdir(parents=True, exist_ok=True)
    fd = os.open(anchor, _DIRECTORY & ~os.O_NOFOLLOW)
    try:
        for name in base.relative_to(anchor).parts:
            try:
                inner = _open_folder(name, fd)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=fd)
                inner = _open_folder(name, fd)
            os.close(fd)
            fd = inner
            if name == ".isoagent":
                _ignore_all(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_folder(name: str, parent: int) -> int:
    try:
        return os.open(name, _DIRECTORY, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # O_DIRECTORY's answer to a link
            exc.strerror = f"{name} is a symbolic link or not a folder"
        raise


def _ignore_all(folder: int) -> None:
    try:
        ignore = FileIO(os.open(".gitignore", _NEW_FILE, 0o600, dir_fd=folder), "wb")
    except FileExistsError:
        return
    with ignore:
        write_all(ignore, b"*\n")


def write_all(file: FileIO, data: bytes | memoryview) -> None:
    """Write all of ``data`` to an unbuffered file, whose writes may be partial."""
    view = memoryview(data)
    while view:
        view = view[file.write(view) :]


class LineSeal(Protocol):
    """What marks each line written as this user's isoagent's (``run_seal.Seal``)."""

    def add(self, line: bytes) -> None: ...
    def close(self) -> None: ...


class TranscriptWriter:
    """Appends events as JSONL lines, flushed one by one so a crash loses nothing written;
    each event gets the time it was written, unless it has one.

    A file that cannot be created or written (disk full) is reported once on stderr;
    the run goes on.
    """

    def __init__(
        self,
        path: Path,
        create: Callable[[], FileIO],
        seal: LineSeal | None = None,
        spend: Callable[[int], None] | None = None,
    ) -> None:
        """``create``: makes the file ``path`` names (``RunFolder.opener``: new, in the run
        folder's fd, following no link; never opened by its path); ``seal``: told each line
        once it is written whole; ``spend``: told each line's size before it is written; it
        may raise to refuse it."""
        self.path = path
        self._spend = spend
        self.seal = seal
        self._file: FileIO | None = None
        self._end = 0  # end of the last complete line
        try:
            self._file = create()
            self._end = self._file.tell()
        except OSError as exc:
            self._fail(exc)

    def __call__(self, event: Event) -> None:
        if self._file is None:
            return
        if isinstance(event, Event) and event.timestamp is None:
            event = msgspec.structs.replace(event, timestamp=datetime.now(UTC))
        try:
            line = _encoder.encode(event) + b"\n"  # text that is not UTF-8 cannot be encoded
            if self._spend is not None:
                self._spend(len(line))
            write_all(self._file, line)
            self._end += len(line)
            if self.seal is not None:
                self.seal.add(line)
        except (OSError, UnicodeEncodeError) as exc:
            with contextlib.suppress(OSError):  # keep valid JSONL: drop the partial line
                self._file.truncate(self._end)
            self._fail(exc)

    def _fail(self, exc: OSError | UnicodeEncodeError) -> None:
        why = (exc.strerror if isinstance(exc, OSError) else None) or exc
        print(f"isoagent: cannot write transcript {self.path}: {why}", file=sys.stderr)
        self.close()

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        if self.seal is not None:
            self.seal.close()
            self.seal = None
