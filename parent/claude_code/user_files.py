"""Where Claude Code keeps the files isoagent reads besides agent files, and how they read.

The user's are in Claude Code's folder (``$CLAUDE_CONFIG_DIR``, else ``~/.claude``), the
project's in the workspace's ``.claude``; ``--setting-sources`` (the SDK's
``setting_sources``) chooses among ``user``, ``project`` (``.claude/settings.json``, the
project's folders) and ``local`` (``.claude/settings.local.json``); None: all three.
Markdown files (commands, output styles) may open with YAML front matter.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MAX_FILE = 1024 * 1024  # a settings file or a command is small; a bigger one is not read


def config_dir() -> Path:
    """Claude Code's folder: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")


def uses(sources: Sequence[str] | None, source: str) -> bool:
    """Whether ``--setting-sources`` (None: every source) includes ``source``."""
    return sources is None or source in sources


def settings_files(workdir: Path, sources: Sequence[str] | None) -> list[Path]:
    """The settings files of the sources used, lowest precedence first."""
    files = {
        "user": config_dir() / "settings.json",
        "project": workdir / ".claude" / "settings.json",
        "local": workdir / ".claude" / "settings.local.json",
    }
    return [path for source, path in files.items() if uses(sources, source)]


def read_setting(workdir: Path, sources: Sequence[str] | None, key: str) -> tuple[Any, Path | None]:
    """``key`` as the settings files say it (the last that has it wins), and which file."""
    value, where = None, None
    for path in settings_files(workdir, sources):
        data = _json(path)
        if key in data:
            value, where = data[key], path
    return value, where


def markdown_files(folder: Path) -> list[Path]:
    """The ``*.md`` files in ``folder`` and its sub-folders (symlinked folders not
    followed), in path order."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        found += [Path(root, name) for name in files if name.endswith(".md")]
    return sorted(path for path in found if path.is_file())


def front_matter(path: Path) -> tuple[dict[str, Any], str]:
    """A markdown file's front matter and its body; a ``ValueError`` says what is wrong."""
    from isoagent.parent.claude_code.agent_files import read_front_matter

    text = _read(path)
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---", 3)
    if end < 0:
        raise ValueError(f"{path}: its front matter has no closing ---")
    lines = text[4:end].splitlines()
    data, _ = read_front_matter(lines, lambda line, why: ValueError(f"{path}:{line}: {why}"))
    return data, text[end + 4 :].lstrip("\n")


def read_regular(path: Path, most: int) -> bytes | None:
    """A regular file's first ``most`` bytes; None when there is none (missing, unreadable,
    a folder). A link is followed; a FIFO or a device is not read: a workspace's would hold
    the parent forever, or read a disk."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        try:
            return file.read(most) if stat.S_ISREG(os.fstat(fd).st_mode) else None
        except OSError:
            return None


def _read(path: Path) -> str:
    data = read_regular(path, MAX_FILE + 1)
    if data is None:
        raise OSError(f"{path}: not a regular file that can be read")
    if len(data) > MAX_FILE:
        raise ValueError(f"{path}: larger than {MAX_FILE // 1024} KiB")
    return data.decode("utf-8", "replace")


def _json(path: Path) -> dict[str, Any]:
    """A settings file's object ({}: missing, unreadable or not a JSON object)."""
    try:
        parsed = json.loads(_read(path))
    except (OSError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) else {}
