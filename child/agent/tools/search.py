"""Claude Code's ``Glob``, confined to the workspace, and the walk and glob matching it
shares with ``Grep``."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated

import msgspec

from isoagent.child.agent.tools.base import Tool, ToolContext, ToolError
from isoagent.child.agent.tools.workspace import (
    relative,
    resolve_in_workspace,
    workspace_root,
)

MAX_GLOB_RESULTS = 1000
_SKIP_DIRS = frozenset({".git", ".isoagent"})  # .isoagent: our own run folders

Parts = Sequence[str]


class GlobInput(msgspec.Struct, forbid_unknown_fields=True):
    pattern: Annotated[
        str, msgspec.Meta(description="Glob pattern, e.g. '**/*.py' or 'src/*.{ts,tsx}'.")
    ]
    path: Annotated[
        str, msgspec.Meta(description="Directory to search in (default: the workspace).")
    ] = "."


class Glob(Tool[GlobInput]):
    name = "Glob"
    description = (
        "Find files by name pattern. `*` matches within one directory level, `**` matches "
        "any number of directories, `{a,b}` alternatives. Returns paths relative to the "
        f"workspace, most recently modified first (at most {MAX_GLOB_RESULTS}). .git "
        "directories and symbolic links are skipped."
    )
    Input = GlobInput
    parallel_safe = True

    def execute(self, inp: GlobInput) -> str:
        if inp.pattern.startswith("/"):
            raise ToolError("pattern must be relative; use `path` to choose the directory")
        patterns = [split_pattern(p) for p in expand_braces(inp.pattern)]
        if any(".." in parts for parts in patterns):
            raise ToolError("pattern must not contain '..'")
        root = workspace_root(self.ctx.workdir)
        base = _directory(self.ctx, inp.path)

        def keep_dir(parts: Parts) -> bool:
            return any(_may_contain(parts, pattern) for pattern in patterns)

        found = []
        for path, parts in walk(base, keep_dir):
            if any(_matches(parts, pattern) for pattern in patterns):
                try:
                    found.append((-path.lstat().st_mtime, relative(root, path)))
                except OSError:  # removed while we walked
                    continue
        if not found:
            return "No files found"
        found.sort()
        lines = [name for _, name in found[:MAX_GLOB_RESULTS]]
        if len(found) > MAX_GLOB_RESULTS:
            lines.append(
                f"[... {len(found) - MAX_GLOB_RESULTS} more files not shown; "
                "use a narrower pattern or path]"
            )
        return "\n".join(lines)


def _directory(ctx: ToolContext, path: str) -> Path:
    base = resolve_in_workspace(ctx.workdir, path, must_exist=True, add_dirs=ctx.add_dirs)
    if not base.is_dir():
        raise ToolError(f"{path!r} is not a directory")
    return base


def walk(base: Path, keep_dir: Callable[[Parts], bool]) -> Iterator[tuple[Path, Parts]]:
    """Regular files under ``base`` in name order, with their path parts relative to it.

    Symbolic links are neither followed nor returned, so a walk never leaves ``base``.
    """
    for dirpath, dirnames, filenames in os.walk(base):
        rel = Path(dirpath).relative_to(base).parts
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and keep_dir((*rel, d)))
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if not path.is_symlink():
                yield path, (*rel, name)


def expand_braces(pattern: str) -> list[str]:
    """``a.{py,pyi}`` -> ``a.py``, ``a.pyi`` (innermost braces first, so nesting works)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [p for alt in match.group(1).split(",") for p in expand_braces(head + alt + tail)]


def split_pattern(pattern: str) -> list[str]:
    return [part for part in pattern.split("/") if part not in ("", ".")]


def _matches(parts: Parts, pattern: Parts) -> bool:
    """Whether path ``parts`` match glob ``pattern`` parts, ``**`` standing for any depth."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_matches(parts[i:], pattern[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], pattern[0]) and _matches(parts[1:], pattern[1:])


def _may_contain(parts: Parts, pattern: Parts) -> bool:
    """Whether a directory at ``parts`` can hold a path that matches ``pattern``."""
    if not parts:
        return True
    if not pattern:
        return False
    if pattern[0] == "**":
        return True
    return fnmatchcase(parts[0], pattern[0]) and _may_contain(parts[1:], pattern[1:])


def glob_filter(parts: Parts, pattern: Parts) -> bool:
    """Grep's file filter: a pattern without ``/`` matches the file name at any depth."""
    if len(pattern) == 1:
        return fnmatchcase(parts[-1], pattern[0])
    return _matches(parts, pattern)
