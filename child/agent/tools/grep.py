"""Claude Code's ``Grep``, in pure Python: its inputs (``output_mode``, ``-A``/``-B``/``-C``,
``-n``, ``-i``, ``-o``, ``type``, ``head_limit``, ``offset``, ``multiline``) and its output's
shape (ripgrep's ``path:line:text``, ``path-line-text`` for context, ``--`` between groups),
confined to the workspace like every file tool."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from isoagent.child.agent.tools.base import Tool, ToolError
from isoagent.child.agent.tools.search import (
    expand_braces,
    glob_filter,
    split_pattern,
    walk,
)
from isoagent.child.agent.tools.workspace import (
    looks_binary,
    relative,
    resolve_in_workspace,
    workspace_root,
)

MAX_GREP_FILE_BYTES = 10 * 1024 * 1024
MAX_GREP_LINE_CHARS = 500
DEFAULT_HEAD_LIMIT = 250  # Claude Code's
# with head_limit 0 (no limit) still never gather more entries than this
UNLIMITED_ENTRIES = 100_000
NO_FILES = "No files found"
NO_MATCHES = "No matches found"

# ripgrep's --type names for the common languages: the file names each stands for
FILE_TYPES: dict[str, tuple[str, ...]] = {
    "c": ("*.c", "*.h"),
    "cpp": ("*.cpp", "*.cc", "*.cxx", "*.hpp", "*.hh", "*.hxx", "*.h"),
    "cs": ("*.cs",),
    "css": ("*.css", "*.scss"),
    "go": ("*.go",),
    "html": ("*.html", "*.htm"),
    "java": ("*.java",),
    "js": ("*.js", "*.jsx", "*.mjs", "*.cjs", "*.vue"),
    "json": ("*.json",),
    "kotlin": ("*.kt", "*.kts"),
    "md": ("*.md", "*.markdown"),
    "php": ("*.php",),
    "py": ("*.py", "*.pyi"),
    "rb": ("*.rb",),
    "rust": ("*.rs",),
    "sh": ("*.sh", "*.bash", "*.zsh"),
    "sql": ("*.sql",),
    "swift": ("*.swift",),
    "toml": ("*.toml",),
    "ts": ("*.ts", "*.tsx", "*.mts", "*.cts"),
    "txt": ("*.txt",),
    "yaml": ("*.yaml", "*.yml"),
}
_CONTEXT = "Lines of context (content mode)."


class GrepInput(msgspec.Struct, forbid_unknown_fields=True):
    """Claude Code's Grep input: the same names, types and defaults."""

    pattern: Annotated[str, msgspec.Meta(description="Python regular expression to search for.")]
    path: Annotated[
        str, msgspec.Meta(description="File or directory to search (default: the workspace).")
    ] = "."
    glob: Annotated[
        str, msgspec.Meta(description="Only files matching this glob, e.g. '*.py', '*.{ts,tsx}'.")
    ] = ""
    output_mode: Annotated[
        Literal["content", "files_with_matches", "count"],
        msgspec.Meta(description="Matching lines, file paths (default) or counts per file."),
    ] = "files_with_matches"
    before: Annotated[int, msgspec.Meta(ge=0, description=_CONTEXT + " Before.")] = msgspec.field(
        default=0, name="-B"
    )
    after: Annotated[int, msgspec.Meta(ge=0, description=_CONTEXT + " After.")] = msgspec.field(
        default=0, name="-A"
    )
    around: Annotated[int, msgspec.Meta(ge=0, description=_CONTEXT + " Both.")] = msgspec.field(
        default=0, name="-C"
    )
    context: Annotated[int, msgspec.Meta(ge=0, description="The same as -C.")] = 0
    line_numbers: Annotated[
        bool, msgspec.Meta(description="Line numbers (content mode; default true).")
    ] = msgspec.field(default=True, name="-n")
    ignore_case: Annotated[bool, msgspec.Meta(description="Case-insensitive.")] = msgspec.field(
        default=False, name="-i"
    )
    only_matching: Annotated[
        bool, msgspec.Meta(description="Only the matched parts (content mode).")
    ] = msgspec.field(default=False, name="-o")
    type: Annotated[
        str, msgspec.Meta(description=f"File type: {', '.join(sorted(FILE_TYPES))}.")
    ] = ""
    head_limit: Annotated[
        int,
        msgspec.Meta(ge=0, description=f"First N entries (default {DEFAULT_HEAD_LIMIT}; 0: all)."),
    ] = DEFAULT_HEAD_LIMIT
    offset: Annotated[int, msgspec.Meta(ge=0, description="Skip the first N lines or entries.")] = 0
    multiline: Annotated[
        bool, msgspec.Meta(description="`.` matches newlines; patterns may span lines.")
    ] = False


class Grep(Tool[GrepInput]):
    name = "Grep"
    description = (
        "Search file contents with a Python regular expression. output_mode "
        "files_with_matches (default) lists the files, newest first; content shows "
        "`path:line:text` (with -A/-B/-C context); count, matches per file. Paths are relative "
        "to the workspace. Skips .git, binary files, files over 10 MB and symbolic links."
    )
    Input = GrepInput
    parallel_safe = True

    def execute(self, inp: GrepInput) -> str:
        flags = (re.IGNORECASE if inp.ignore_case else 0) | (
            re.MULTILINE | re.DOTALL if inp.multiline else 0
        )
        try:
            regex = re.compile(inp.pattern, flags)
        except (re.error, OverflowError, RecursionError) as exc:  # a{99999999999}, deep nesting
            raise ToolError(f"invalid regex {inp.pattern!r}: {exc}") from None
        if inp.type and inp.type not in FILE_TYPES:
            raise ToolError(f"unknown type {inp.type!r}; known: {', '.join(sorted(FILE_TYPES))}")
        ctx = self.ctx
        root = workspace_root(ctx.workdir)
        target = resolve_in_workspace(ctx.workdir, inp.path, must_exist=True, add_dirs=ctx.add_dirs)
        single = target.is_file()
        files = [target] if single else _files(target, inp.glob, FILE_TYPES.get(inp.type, ()))
        page = _Page(inp.offset, inp.head_limit or UNLIMITED_ENTRIES)
        if inp.output_mode == "files_with_matches":
            return _files_with_matches(files, regex, inp.multiline, root, page)
        searched = _searched(files, regex, inp.multiline)
        if inp.output_mode == "count":
            return _counts(searched, root, page)
        return _content(searched, None if single else root, inp, page)


def _files_with_matches(
    files: Iterable[Path], regex: re.Pattern[str], multiline: bool, root: Path, page: _Page
) -> str:
    """The files with a match, newest first, as Claude Code lists them."""
    found = []
    for path in files:
        text = _text(path)
        if text is not None and _has_match(text, regex, multiline):
            try:
                found.append((-path.stat().st_mtime, relative(root, path)))
            except OSError:  # removed while we searched
                continue
    if not found:
        return NO_FILES
    page.extend(name for _, name in sorted(found))
    return f"Found {len(found)} file{'s' * (len(found) != 1)}\n" + page.text()


def _counts(searched: Iterator[tuple[Path, _Lines]], root: Path, page: _Page) -> str:
    """``path:N``, the matching lines of each file, and the total."""
    occurrences = 0
    for path, lines in searched:
        occurrences += len(lines.matched)
        page.add(f"{relative(root, path)}:{len(lines.matched)}")
    if not page.total:
        return f"{NO_MATCHES}\n\nFound 0 total occurrences across 0 files."
    return page.text() + f"\n\nFound {occurrences} total occurrences across {page.total} files."


def _content(
    searched: Iterator[tuple[Path, _Lines]], root: Path | None, inp: GrepInput, page: _Page
) -> str:
    """The matching lines with their context (``root`` None: one file, named nowhere)."""
    around = inp.around or inp.context
    before, after = inp.before or around, inp.after or around
    for path, lines in searched:
        name = "" if root is None else relative(root, path)
        for group in _groups(lines, before, after):
            if (before or after) and page.total:
                page.add("--")
            page.extend(_printed(lines, group, name, inp), stop=True)
            if page.full:
                return page.text()
    return page.text() if page.total else NO_MATCHES


@dataclass
class _Lines:
    """One file's lines and which of them match (0-based), with the matched parts."""

    lines: list[str]
    matched: dict[int, list[str]]


class _Page:
    """The entries of a result from ``offset``, at most ``limit``; ``total`` counts those
    seen (which, once ``full``, stops short of all there are)."""

    def __init__(self, offset: int, limit: int) -> None:
        self.offset, self.limit = offset, limit
        self.entries: list[str] = []
        self.total = 0

    @property
    def full(self) -> bool:
        return self.total > self.offset + self.limit

    def add(self, entry: str) -> None:
        self.total += 1
        if self.offset < self.total <= self.offset + self.limit:
            self.entries.append(entry)

    def extend(self, entries: Iterable[str], stop: bool = False) -> None:
        """Add ``entries``; with ``stop``, no more once the page is ``full``."""
        for entry in entries:
            self.add(entry)
            if stop and self.full:
                return

    def text(self) -> str:
        text = "\n".join(self.entries)
        if self.full or self.offset:
            shown = f"limit: {self.limit}" + (f", offset: {self.offset}" if self.offset else "")
            more = f"; offset={self.offset + self.limit} continues" if self.full else ""
            text += f"\n\n[Showing results with pagination = {shown}{more}]"
        return text


def _files(base: Path, glob: str, kinds: tuple[str, ...]) -> Iterator[Path]:
    """The files under ``base`` that ``glob`` and the ``type``'s names (``kinds``) let through."""
    patterns = [split_pattern(p) for p in expand_braces(glob)] if glob else []
    for path, parts in walk(base, lambda _: True):
        if patterns and not any(glob_filter(parts, pattern) for pattern in patterns):
            continue
        if kinds and not any(glob_filter(parts, [kind]) for kind in kinds):
            continue
        yield path


def _text(path: Path) -> str | None:
    """A text file's content; None for a binary, huge or unreadable one."""
    try:
        if path.stat().st_size > MAX_GREP_FILE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    return None if looks_binary(data) else data.decode("utf-8", "replace")


def _has_match(text: str, regex: re.Pattern[str], multiline: bool) -> bool:
    if multiline:
        return regex.search(text) is not None
    return any(regex.search(line) for line in text.split("\n"))


def _searched(
    files: Iterable[Path], regex: re.Pattern[str], multiline: bool
) -> Iterator[tuple[Path, _Lines]]:
    """Each text file with a match, and its lines."""
    for path in files:
        text = _text(path)
        if text is not None:
            lines = _match(text, regex, multiline)
            if lines.matched:
                yield path, lines


def _match(text: str, regex: re.Pattern[str], multiline: bool) -> _Lines:
    """``text``'s lines and those that match: line by line, or (``multiline``) where a match
    of the whole text starts and every line it spans."""
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # the newline ending the last line starts no line of its own
    matched: dict[int, list[str]] = {}
    if not multiline:
        for number, line in enumerate(lines):
            parts = [m.group() for m in regex.finditer(line)]
            if parts:
                matched[number] = parts
        return _Lines(lines, matched)
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    for m in regex.finditer(text):
        first = bisect.bisect_right(starts, m.start()) - 1
        last = bisect.bisect_right(starts, max(m.end() - 1, m.start())) - 1
        matched.setdefault(first, []).append(m.group())
        for number in range(first + 1, last + 1):
            matched.setdefault(number, [])
    return _Lines(lines, matched)


def _groups(found: _Lines, before: int, after: int) -> Iterator[range]:
    """The runs of lines to print: each match with its context, runs that touch joined."""
    group: range | None = None
    for number in sorted(found.matched):
        start, end = max(number - before, 0), min(number + after, len(found.lines) - 1)
        if group is not None and start <= group.stop:
            group = range(group.start, max(group.stop, end + 1))
            continue
        if group is not None:
            yield group
        group = range(start, end + 1)
    if group is not None:
        yield group


def _printed(found: _Lines, group: range, name: str, inp: GrepInput) -> Iterator[str]:
    """A run of lines as ripgrep prints them: ``name:line:text``, ``-`` for a context line
    (``name`` "" for a lone file; no line number without -n); with -o, each matched part."""
    for number in group:
        if inp.only_matching:
            for part in found.matched.get(number, ()):
                if part:
                    yield _line(name, number, ":", part, inp.line_numbers)
            continue
        sep = ":" if number in found.matched else "-"
        yield _line(name, number, sep, found.lines[number], inp.line_numbers)


def _line(name: str, number: int, sep: str, text: str, numbered: bool) -> str:
    if len(text) > MAX_GREP_LINE_CHARS:
        text = f"{text[:MAX_GREP_LINE_CHARS]} [... line cut]"
    head = f"{name}{sep}" if name else ""
    return f"{head}{number + 1}{sep}{text}" if numbered else f"{head}{text}"
