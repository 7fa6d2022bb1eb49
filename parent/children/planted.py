"""Protected names a writing child created: moved out of the workspace, and said.

The kernel keeps an existing ``.git``, ``.claude`` or ``.isoagent`` read-only in a writing
child (``sandbox_policy.protected_paths``), but a mount needs something to cover: a child
can create one that was not there (``.claude/agents/Explore.md``, ``git init`` with a
``core.fsmonitor``, an ``.mcp.json``) for whatever runs in the workspace next. When a
writing child ends, what was created of these names at the top of the workspace and of
each added folder is moved into the run folder, where the user can look at it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

NAMES = (".git", ".claude", ".mcp.json", ".gitmodules", ".vscode", ".idea")


class PlantedNames:
    """The names each root had when the run began, and where new ones are moved."""

    def __init__(self, roots: Sequence[Path], keep: Path) -> None:
        self.keep = keep
        self.before = {root: {n for n in NAMES if os.path.lexists(root / n)} for root in roots}

    def take(self, child: str) -> list[tuple[Path, Path]]:
        """Move each new name into ``keep/child/N-root``; (where it was, where it is)."""
        moved = []
        for number, (root, had) in enumerate(self.before.items()):
            for name in NAMES:
                path = root / name
                if name in had or not os.path.lexists(path):
                    continue
                folder = self.keep / child / f"{number}-{root.name}"
                folder.mkdir(parents=True, exist_ok=True)
                shutil.move(path, folder / name)
                moved.append((path, folder / name))
        return moved
