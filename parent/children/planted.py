"""Protected names a writing child created: moved out of the workspace, and said.

The kernel keeps an existing ``.git``, ``.claude`` or ``.isoagent`` read-only in a writing
child (``sandbox_policy.protected_paths``), but a mount needs something to cover: a child
can create one that was not there (``.claude/agents/Explore.md``, ``git init`` with a
``core.fsmonitor`` in a sub-folder, which a shell prompt's ``git status`` runs on ``cd``,
an ``.mcp.json``) for whatever runs there next. When a writing child ends, and before any
of the user's hooks runs while one works (``sweep``), each of these names created anywhere
under the workspace and the added folders is moved into the run folder, where the user can
look at it.

The workspace is the children's to change while this runs: a folder may have become a link
(to the home, whose ``.claude`` and ``.vscode`` are no child's). So every folder is opened
beneath its root without following a link (``beneath.open_beneath``), listed through its
descriptor, and each name moved from it with ``renameat`` (or copied through descriptors,
across file systems); a folder that became a link is dropped, never followed.

Finding them costs a walk of the folders when the first writing child starts, then a
``stat`` of each folder when one ends: only folders whose ctime changed (an entry was
added, renamed or removed; a child can set a folder's mtime back, not its ctime) are
listed again, and folders new since are walked. That ``stat`` only says where to look; what
is listed and moved is opened as above.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from isoagent.parent.children.sandbox_policy import SandboxRefused, sandbox_mode
from isoagent.parent.records.beneath import FOLDER, open_beneath
from isoagent.parent.records.run_folder import RunFolder
from isoagent.parent.records.terminal_text import warn
from isoagent.parent.settings import Settings
from isoagent.protocol import AgentSpec

NAMES = frozenset((".git", ".claude", ".mcp.json", ".gitmodules", ".vscode", ".idea"))
SKIPPED = ".isoagent"  # the run folders: read-only to children
KEEP = "planted"  # the run folder's folder for them
FOLDER_LIMIT = 50_000  # past this many folders, only what is already known is checked
# up to this many folders, ``snapshot`` and ``take`` run on the event loop: their stats cost
# less than the hop to a thread and back (about 120 µs of CPU; a session's first, with its
# executor, 2 ms)
INLINE_FOLDERS = 64
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class PlantedNames:
    """The protected names under ``roots`` when ``snapshot`` ran, and the run folder new
    ones go to (``run``'s ``planted``)."""

    def __init__(self, roots: Sequence[Path], run: RunFolder) -> None:
        self.roots = [str(root) for root in roots]
        self.run = run
        self.folders: dict[str, int] = {}  # every folder walked: its ctime (ns) when listed
        self.known: set[str] = set()  # the protected names there, and those left alone since
        self.taken = False  # whether snapshot ran
        self.partial = False  # more than FOLDER_LIMIT folders: new ones past it are not seen
        self._looking = threading.RLock()  # a child's end and a hook's sweep may overlap
        self._sweeps = 0

    @property
    def small(self) -> bool:
        """Few enough folders that ``take`` need not leave the event loop."""
        return len(self.folders) <= INLINE_FOLDERS

    def snapshot(self, most: int = FOLDER_LIMIT) -> bool:
        """Walk the roots: call it before the first writing child starts (it blocks). With
        ``most`` under ``FOLDER_LIMIT`` (``INLINE_FOLDERS``: walked on the event loop), a
        tree of more folders is not walked further and nothing of it is kept: False, to
        walk it again, whole, in a thread."""
        with self._looking, self._opened_roots() as tops:
            for root, top in zip(self.roots, tops, strict=True):
                if top >= 0:
                    self.known.update(self._walk(root, top, root, most))
            if self.partial and most < FOLDER_LIMIT:
                self.folders.clear()
                self.known.clear()
                self.partial = False
                return False
            self.taken = True
            return True

    def sweep(self) -> None:
        """Before one of the user's hooks runs (any thread; it blocks): what children
        created since the last look is moved, and said, as at a child's end
        (``planted/hook-N``). Nothing to do before the first writing child started."""
        if not self.taken:
            return
        with self._looking:
            self._sweeps += 1
            moved = self.take(f"hook-{self._sweeps}")
        say(moved, self.run)

    def nested(self, names: Sequence[str]) -> tuple[str, ...]:
        """The ``names`` found below the roots' top (those at the top are protected
        anyway): a writing child gets them read-only too."""
        tops = {os.path.join(root, name) for root in self.roots for name in names}
        return tuple(
            sorted(p for p in self.known if os.path.basename(p) in names and p not in tops)
        )

    def take(self, child: str) -> list[tuple[Path, Path | None]]:
        """Move each protected name new since the last look into ``planted/child/N-root``;
        (where it was, where it is: None if it could not be moved). It blocks: unless the
        tree is ``small``, run it in a thread."""
        new: list[str] = []
        with self._looking, self._opened_roots() as tops:
            by_root = dict(zip(self.roots, tops, strict=True))
            for folder, ctime in list(self.folders.items()):
                root = self._root_of(folder)
                top = by_root[root]
                try:  # where to look: a path's stat, a link on the way followed at worst
                    now = os.stat(_inside(folder, root), dir_fd=top, follow_symlinks=False)
                except OSError:
                    del self.folders[folder]
                    continue
                if now.st_ctime_ns != ctime:
                    new += self._list(root, top, folder)
            moved: list[tuple[Path, Path | None]] = []
            for path in sorted(p for p in new if p not in self.known):
                root = self._root_of(path)
                number = self.roots.index(root)
                where = Path(child, f"{number}-{Path(root).name}", os.path.relpath(path, root))
                try:
                    self._move(by_root[root], _inside(path, root), where)
                except OSError:
                    self.known.add(path)  # said once
                    moved.append((Path(path), None))
                else:
                    moved.append((Path(path), self.run.path / KEEP / where))
        return moved

    @contextlib.contextmanager
    def _opened_roots(self) -> Iterator[list[int]]:
        """Each root as a folder fd (-1: it cannot be opened now), closed afterwards."""
        tops = []
        try:
            for root in self.roots:
                try:
                    tops.append(os.open(root, FOLDER & ~os.O_NOFOLLOW))  # the user's own path
                except OSError:
                    tops.append(-1)
            yield tops
        finally:
            for top in tops:
                if top >= 0:
                    os.close(top)

    def _root_of(self, path: str) -> str:
        """The root ``path`` is in (the deepest, for an added folder inside another)."""
        if len(self.roots) == 1:
            return self.roots[0]
        return max((r for r in self.roots if path == r or _under(path, r)), key=len)

    def _walk(self, root: str, top: int, start: str, most: int = FOLDER_LIMIT) -> list[str]:
        """The protected names under ``start`` (a folder of ``root``, whose fd is ``top``),
        every folder it holds recorded, up to ``most`` folders in all (then ``partial``)."""
        found, stack = [], [start]
        while stack:
            folder = stack.pop()
            if folder in self.folders:  # an added folder inside the workspace
                continue
            if len(self.folders) >= most:
                self.partial = True
                break
            listed = self._entries(top, _inside(folder, root))
            if listed is None:
                continue
            ctime, names, subfolders = listed
            self.folders[folder] = ctime
            found += [os.path.join(folder, name) for name in names]
            stack += [os.path.join(folder, name) for name in subfolders]
        return found

    def _list(self, root: str, top: int, folder: str) -> list[str]:
        """The protected names in ``folder`` and in the folders new in it; a folder that
        cannot be opened (gone, or a link now) is forgotten."""
        listed = self._entries(top, _inside(folder, root))
        if listed is None:
            self.folders.pop(folder, None)
            return []
        ctime, names, subfolders = listed
        self.folders[folder] = ctime
        found = [os.path.join(folder, name) for name in names]
        for name in subfolders:
            sub = os.path.join(folder, name)
            if sub not in self.folders:
                found += self._walk(root, top, sub)
        return found

    @staticmethod
    def _entries(top: int, inside: str) -> tuple[int, list[str], list[str]] | None:
        """(ctime, protected names, sub-folders) of the folder ``inside`` beneath ``top``,
        opened and listed without following a link; None if it cannot be."""
        try:
            fd = open_beneath(top, inside) if inside != "." else os.dup(top)
        except OSError:
            return None
        names, subfolders = [], []
        try:
            ctime = os.fstat(fd).st_ctime_ns
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.name in NAMES:
                        names.append(entry.name)
                    elif entry.name != SKIPPED and entry.is_dir(follow_symlinks=False):
                        subfolders.append(entry.name)
        except OSError:
            return None
        finally:
            os.close(fd)
        return ctime, names, subfolders

    def _move(self, top: int, inside: str, where: Path) -> None:
        """Move ``inside`` (beneath ``top``) to ``planted/where`` in the run folder: a rename
        between the two folders' fds, or a copy and a removal across file systems."""
        folder, name = os.path.split(inside)
        source = open_beneath(top, folder or ".")
        try:
            target = self._keep_folder(where.parent)
            try:
                try:
                    os.rename(name, where.name, src_dir_fd=source, dst_dir_fd=target)
                except OSError as exc:
                    if exc.errno != errno.EXDEV:
                        raise
                    _copy(source, name, target, where.name)
                    _remove(source, name)
            finally:
                os.close(target)
        finally:
            os.close(source)

    def _keep_folder(self, where: Path) -> int:
        """``planted/where`` in the run folder, made where missing, as a folder fd."""
        fd = os.dup(self.run.fd)
        try:
            for name in (KEEP, *where.parts):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=fd)
                inner = os.open(name, FOLDER, dir_fd=fd)
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return fd


def say(moved: list[tuple[Path, Path | None]], run: RunFolder) -> None:
    """One warning a name ``take`` moved (or could not)."""
    for was, now in moved:
        what = (
            f"moved to {run.display(now)}"
            if now is not None
            else "it could not be moved: remove it before anything runs there"
        )
        warn(
            f"warning: a child created {was}, which children may not create (it runs or "
            f"configures what comes next): {what}"
        )


def _copy(source: int, name: str, target: int, new: str) -> None:
    """Copy ``name`` in the folder ``source`` to ``new`` in ``target``, links as links,
    folders entry by entry, through descriptors; other kinds (a fifo, a socket) are left."""
    st = os.stat(name, dir_fd=source, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(name, dir_fd=source), new, dir_fd=target)
    elif stat.S_ISREG(st.st_mode):
        reading = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=source)
        try:
            writing = os.open(new, _NEW, 0o600, dir_fd=target)
            with open(reading, "rb", closefd=False) as src, open(writing, "wb") as dst:
                shutil.copyfileobj(src, dst)
        finally:
            os.close(reading)
    elif stat.S_ISDIR(st.st_mode):
        os.mkdir(new, 0o700, dir_fd=target)
        inner_source = os.open(name, FOLDER, dir_fd=source)
        try:
            inner_target = os.open(new, FOLDER, dir_fd=target)
            try:
                for entry in os.listdir(inner_source):
                    _copy(inner_source, entry, inner_target, entry)
            finally:
                os.close(inner_target)
        finally:
            os.close(inner_source)


def _remove(folder: int, name: str) -> None:
    """Remove ``name`` from the folder ``folder``: a tree without following its links."""
    if stat.S_ISDIR(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
        shutil.rmtree(name, dir_fd=folder)
    else:
        os.unlink(name, dir_fd=folder)


def _under(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def _inside(path: str, root: str) -> str:
    """``path`` (``root`` or below it) relative to ``root`` ("." for the root itself)."""
    return path[len(root.rstrip("/")) + 1 :] if path != root else "."


def may_write(agent: AgentSpec, settings: Settings) -> bool:
    """Whether a child of ``agent`` may write in the workspace (and so plant there)."""
    try:
        return sandbox_mode(agent, settings.sandbox, settings.allow_unsandboxed) != "read-only"
    except SandboxRefused:  # it will not start
        return False
