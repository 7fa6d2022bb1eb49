"""Confinement of file paths to the workspace: no ``..`` escape, no symlink escape."""

from __future__ import annotations

import os
from pathlib import Path

from isoagent.child.agent.tools.base import ToolError


def workspace_root(workdir: Path) -> Path:
    return Path(os.path.realpath(workdir))


def resolve_in_workspace(workdir: Path, path: str, *, must_exist: bool) -> Path:
    """The real path ``path`` names, refused unless it lies inside ``workdir``.

    Relative paths are taken from ``workdir``. Every symlink on the way (the file
    itself or any parent directory, even a dangling one) is resolved before the
    check, so a link pointing outside is refused like ``..`` is.
    """
    root = workspace_root(workdir)
    try:
        real = Path(os.path.realpath(root / path))
    except (ValueError, OSError) as exc:  # embedded NUL, symlink loop
        raise ToolError(f"invalid path {path!r}: {exc}") from None
    if real != root and root not in real.parents:
        raise ToolError(f"path {path!r} is outside the workspace")
    if must_exist and not real.exists():
        raise ToolError(f"{path!r} does not exist")
    return real


def relative(root: Path, path: Path) -> str:
    """``path`` as the model should see it: relative to the workspace root."""
    return path.relative_to(root).as_posix() if path != root else "."


SNIFF_BYTES = 8192


def looks_binary(head: bytes) -> bool:
    """A NUL byte in the first 8 KiB: what git and grep take for a binary file."""
    return b"\0" in head[:SNIFF_BYTES]
