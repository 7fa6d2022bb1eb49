"""Confinement of file paths to the workspace and the added folders (``--add-dir``):
no ``..`` escape, no symlink escape."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from isoagent.child.agent.tools.base import ToolError


def workspace_root(workdir: Path) -> Path:
    return Path(os.path.realpath(workdir))


def resolve_in_workspace(
    workdir: Path, path: str, *, must_exist: bool, add_dirs: Sequence[Path] = ()
) -> Path:
    """The real path ``path`` names, refused unless it lies inside ``workdir`` or one of
    ``add_dirs``.

    Relative paths are taken from ``workdir``. Every symlink on the way (the file
    itself or any parent directory, even a dangling one) is resolved before the
    check, so a link pointing outside is refused like ``..`` is.
    """
    root = workspace_root(workdir)
    try:
        real = Path(os.path.realpath(root / path))
    except (ValueError, OSError) as exc:  # embedded NUL, symlink loop
        raise ToolError(f"invalid path {path!r}: {exc}") from None
    if not any(_inside(real, top) for top in (root, *map(workspace_root, add_dirs))):
        where = "the workspace and the added folders" if add_dirs else "the workspace"
        raise ToolError(f"path {path!r} is outside {where}")
    if must_exist and not real.exists():
        raise ToolError(f"{path!r} does not exist")
    return real


def _inside(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def relative(root: Path, path: Path) -> str:
    """``path`` as the model should see it: relative to the workspace root, absolute when
    it lies in an added folder."""
    if path == root:
        return "."
    return path.relative_to(root).as_posix() if root in path.parents else str(path)


def add_dirs_note(add_dirs: Sequence[Path]) -> str:
    """What a system prompt says of the added folders ("" without any)."""
    if not add_dirs:
        return ""
    names = ", ".join(str(path) for path in add_dirs)
    return f"\n\nBesides the workspace you may also work in these folders (absolute paths): {names}"


SNIFF_BYTES = 8192


def looks_binary(head: bytes) -> bool:
    """A NUL byte in the first 8 KiB: what git and grep take for a binary file."""
    return b"\0" in head[:SNIFF_BYTES]
