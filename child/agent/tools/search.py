"""Search tools confined to the workspace: ``glob`` and ``grep`` (pure Python)."""

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
    looks_binary,
    relative,
    resolve_in_workspace,
    workspace_root,
)

MAX_GLOB_RESULTS = 1000
MAX_GREP_MATCHES = 500
MAX_GREP_FILE_BYTES = 10 * 1024 * 1024
MAX_GREP_LINE_CHARS = 500
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
    name = "glob"
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
        patterns = [_split(p) for p in _expand_braces(inp.pattern)]
        if any(".." in parts for parts in patterns):
            raise ToolError("pattern must not contain '..'")
        root = workspace_root(self.ctx.workdir)
        base = _directory(self.ctx, inp.path)

        def keep_dir(parts: Parts) -> bool:
            return any(_may_contain(parts, pattern) for pattern in patterns)

        found = []
        for path, parts in _walk(base, keep_dir):
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


class GrepInput(msgspec.Struct, forbid_unknown_fields=True):
    pattern: Annotated[
        str, msgspec.Meta(description="Python regular expression, searched in each line.")
    ]
    path: Annotated[
        str, msgspec.Meta(description="File or directory to search (default: the workspace).")
    ] = "."
    glob: Annotated[
        str, msgspec.Meta(description="Only search files matching this glob, e.g. '*.py'.")
    ] = ""
    ignore_case: Annotated[bool, msgspec.Meta(description="Case-insensitive search.")] = False


class Grep(Tool[GrepInput]):
    name = "grep"
    description = (
        "Search file contents with a Python regular expression, line by line. Returns "
        "`path:line_number:line` for each matching line (paths relative to the workspace, "
        f"at most {MAX_GREP_MATCHES} matches). Filter files with `glob` ('*.py', "
        "'*.{ts,tsx}', 'src/**/*.go'). Skips .git, binary files, files over 10 MB and "
        "symbolic links."
    )
    Input = GrepInput
    parallel_safe = True

    def execute(self, inp: GrepInput) -> str:
        try:
            regex = re.compile(inp.pattern, re.IGNORECASE if inp.ignore_case else 0)
        except (re.error, OverflowError, RecursionError) as exc:  # a{99999999999}, deep nesting
            raise ToolError(f"invalid regex {inp.pattern!r}: {exc}") from None
        root = workspace_root(self.ctx.workdir)
        target = resolve_in_workspace(
            self.ctx.workdir, inp.path, must_exist=True, add_dirs=self.ctx.add_dirs
        )
        files = [target] if target.is_file() else self._files(target, inp.glob)
        lines: list[str] = []
        for path in files:
            name = relative(root, path)
            for number, line in _grep_file(path, regex):
                if len(lines) == MAX_GREP_MATCHES:
                    lines.append(
                        f"[... stopped after {MAX_GREP_MATCHES} matches; "
                        "narrow the pattern, path or glob]"
                    )
                    return "\n".join(lines)
                lines.append(f"{name}:{number}:{line}")
        return "\n".join(lines) or "No matches found"

    def _files(self, base: Path, glob: str) -> Iterator[Path]:
        patterns = [_split(p) for p in _expand_braces(glob)] if glob else []
        for path, parts in _walk(base, lambda _: True):
            if not patterns or any(_glob_filter(parts, pattern) for pattern in patterns):
                yield path


def _directory(ctx: ToolContext, path: str) -> Path:
    base = resolve_in_workspace(ctx.workdir, path, must_exist=True, add_dirs=ctx.add_dirs)
    if not base.is_dir():
        raise ToolError(f"{path!r} is not a directory")
    return base


def _grep_file(path: Path, regex: re.Pattern[str]) -> Iterator[tuple[int, str]]:
    """Matching lines of a text file; nothing for binary, huge or unreadable files."""
    try:
        if path.stat().st_size > MAX_GREP_FILE_BYTES:
            return
        data = path.read_bytes()
    except OSError:
        return
    if looks_binary(data):
        return
    for number, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
        if regex.search(line):
            if len(line) > MAX_GREP_LINE_CHARS:
                line = f"{line[:MAX_GREP_LINE_CHARS]} [... line cut]"
            yield number, line


def _walk(base: Path, keep_dir: Callable[[Parts], bool]) -> Iterator[tuple[Path, Parts]]:
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


def _expand_braces(pattern: str) -> list[str]:
    """``a.{py,pyi}`` -> ``a.py``, ``a.pyi`` (innermost braces first, so nesting works)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [p for alt in match.group(1).split(",") for p in _expand_braces(head + alt + tail)]


def _split(pattern: str) -> list[str]:
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


def _glob_filter(parts: Parts, pattern: Parts) -> bool:
    """grep's file filter: a pattern without ``/`` matches the file name at any depth."""
    if len(pattern) == 1:
        return fnmatchcase(parts[-1], pattern[0])
    return _matches(parts, pattern)
