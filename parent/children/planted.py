"""Protected names a writing child created: moved out of the workspace, and said.

The kernel keeps an existing ``.git``, ``.claude`` or ``.isoagent`` read-only in a writing
child (``sandbox_policy.protected_paths``), but a mount needs something to cover: a child
can create one that was not there (``.claude/agents/Explore.md``, ``git init`` with a
``core.fsmonitor`` in a sub-folder, which a shell prompt's ``git status`` runs on ``cd``,
an ``.mcp.json``) for whatever runs there next. When a writing child ends, each of these
names created anywhere under the workspace and the added folders is moved into the run
folder, where the user can look at it.

Finding them costs a walk of the folders when the first writing child starts, then a
``stat`` of each folder when one ends: only folders whose mtime changed (an entry was
added, renamed or removed) are listed again, and folders new since are walked.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from isoagent.parent.children.sandbox_policy import SandboxRefused, sandbox_mode
from isoagent.parent.settings import Settings
from isoagent.protocol import AgentSpec

NAMES = frozenset((".git", ".claude", ".mcp.json", ".gitmodules", ".vscode", ".idea"))
SKIPPED = ".isoagent"  # the run folders: read-only to children
FOLDER_LIMIT = 50_000  # past this many folders, only what is already known is checked
# up to this many folders, ``take`` runs on the event loop: their stats cost less than the
# hop to a thread and back (about 120 µs of CPU)
INLINE_FOLDERS = 64


class PlantedNames:
    """The protected names under ``roots`` when ``snapshot`` ran, and where new ones go."""

    def __init__(self, roots: Sequence[Path], keep: Path) -> None:
        self.roots = [str(root) for root in roots]
        self.keep = keep
        self.folders: dict[str, int] = {}  # every folder walked: its mtime (ns) when listed
        self.known: set[str] = set()  # the protected names there, and those left alone since
        self.taken = False  # whether snapshot ran
        self.partial = False  # more than FOLDER_LIMIT folders: new ones past it are not seen

    @property
    def small(self) -> bool:
        """Few enough folders that ``take`` need not leave the event loop."""
        return len(self.folders) <= INLINE_FOLDERS

    def snapshot(self) -> None:
        """Walk the roots: call it before the first writing child starts (it blocks)."""
        for root in self.roots:
            self.known.update(self._walk(root))
        self.taken = True

    def nested(self, names: Sequence[str]) -> tuple[str, ...]:
        """The ``names`` found below the roots' top (those at the top are protected
        anyway): a writing child gets them read-only too."""
        tops = {os.path.join(root, name) for root in self.roots for name in names}
        return tuple(
            sorted(p for p in self.known if os.path.basename(p) in names and p not in tops)
        )

    def take(self, child: str) -> list[tuple[Path, Path | None]]:
        """Move each protected name new since the last look into ``keep/child/N-root``;
        (where it was, where it is: None if it could not be moved). It blocks: unless the
        tree is ``small``, run it in a thread."""
        new: list[str] = []
        for folder, mtime in list(self.folders.items()):
            try:
                now = os.stat(folder, follow_symlinks=False).st_mtime_ns
            except OSError:
                del self.folders[folder]
                continue
            if now != mtime:
                new += self._list(folder, now)
        moved: list[tuple[Path, Path | None]] = []
        for path in sorted(p for p in new if p not in self.known):
            number, root = next((n, r) for n, r in enumerate(self.roots) if _under(path, r))
            destination = self.keep / child / f"{number}-{Path(root).name}"
            destination = destination / os.path.relpath(path, root)
            try:
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(path, destination)
            except OSError:
                self.known.add(path)  # said once
                moved.append((Path(path), None))
            else:
                moved.append((Path(path), destination))
        return moved

    def _walk(self, top: str) -> list[str]:
        """The protected names under ``top``, every folder it holds recorded."""
        found, stack = [], [top]
        while stack:
            folder = stack.pop()
            if folder in self.folders:  # an added folder inside the workspace
                continue
            if len(self.folders) >= FOLDER_LIMIT:
                self.partial = True
                break
            try:
                mtime = os.stat(folder, follow_symlinks=False).st_mtime_ns
            except OSError:
                continue
            names, subfolders = self._entries(folder)
            self.folders[folder] = mtime
            found += names
            stack += subfolders
        return found

    def _list(self, folder: str, mtime: int) -> list[str]:
        """The protected names in ``folder`` and in the folders new in it."""
        names, subfolders = self._entries(folder)
        self.folders[folder] = mtime
        for sub in subfolders:
            if sub not in self.folders:
                names += self._walk(sub)
        return names

    @staticmethod
    def _entries(folder: str) -> tuple[list[str], list[str]]:
        """(protected names, sub-folders) of ``folder``; symbolic links are not followed."""
        names, subfolders = [], []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.name in NAMES:
                        names.append(entry.path)
                    elif entry.name != SKIPPED and entry.is_dir(follow_symlinks=False):
                        subfolders.append(entry.path)
        except OSError:
            pass
        return names, subfolders


def _under(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def may_write(agent: AgentSpec, settings: Settings) -> bool:
    """Whether a child of ``agent`` may write in the workspace (and so plant there)."""
    try:
        return sandbox_mode(agent, settings.sandbox, settings.allow_unsandboxed) != "read-only"
    except SandboxRefused:  # it will not start
        return False
