"""Claude Code's file tools, confined to the workspace and the added folders: ``Read``,
``Write``, ``Edit``. A ``file_path`` is absolute (as Claude Code's) or relative to the
workspace."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, BinaryIO

import msgspec

from isoagent.child.agent.tools.base import Tool, ToolContext, ToolError
from isoagent.child.agent.tools.workspace import SNIFF_BYTES, looks_binary, resolve_in_workspace

MAX_LINE_CHARS = 2000
DEFAULT_LIMIT = 2000
# a cut line still needs MAX_LINE_CHARS characters, and UTF-8 takes up to 4 bytes each
_MAX_LINE_BYTES = 4 * MAX_LINE_CHARS + 4
# count the lines left after a page only up to this many bytes; beyond, report bytes
_COUNT_LIMIT = 64 * 1024 * 1024
_COUNT_CHUNK = 256 * 1024


_FILE_PATH = "The file's absolute path (or a path relative to the workspace)."


class ReadInput(msgspec.Struct, forbid_unknown_fields=True):
    file_path: Annotated[str, msgspec.Meta(description=_FILE_PATH)]
    offset: Annotated[
        int, msgspec.Meta(ge=0, description="The line to start from (1-based; 0 is 1 too).")
    ] = 1
    limit: Annotated[
        int, msgspec.Meta(ge=1, description=f"How many lines to read. Default {DEFAULT_LIMIT}.")
    ] = DEFAULT_LIMIT


class Read(Tool[ReadInput]):
    name = "Read"
    description = (
        "Read a text file. Lines are numbered like `cat -n` (the number and a tab are not "
        f"part of the file). Shows up to {DEFAULT_LIMIT} lines from `offset`; use offset and "
        f"limit to page through long files. Lines longer than {MAX_LINE_CHARS} characters "
        "are cut. Binary files are refused (use Bash)."
    )
    Input = ReadInput
    parallel_safe = True

    def execute(self, inp: ReadInput) -> str:
        target = _existing_file(self.ctx, inp.file_path)
        try:
            with target.open("rb") as f:
                return _read_page(f, inp.file_path, max(inp.offset, 1), inp.limit)
        except OSError as exc:
            raise ToolError(f"cannot read {inp.file_path!r}: {exc.strerror or exc}") from None


def _read_page(f: BinaryIO, path: str, offset: int, limit: int) -> str:
    """Lines ``offset`` (1-based) to ``offset + limit - 1`` of ``f``, numbered."""
    size = os.fstat(f.fileno()).st_size
    if looks_binary(f.read(SNIFF_BYTES)):
        raise ToolError(
            f"{path!r} is a binary file ({size} bytes); use Bash (e.g. xxd, file) to inspect it"
        )
    f.seek(0)
    if size == 0:
        return "(empty file)"
    skipped = 0
    while skipped < offset - 1 and _next_line(f) is not None:
        skipped += 1
    lines = []
    for number in range(offset, offset + limit):
        line = _next_line(f)
        if line is None:
            break
        lines.append(_numbered(number, *line))
    else:
        lines += _footer(f, size, offset + limit)
    if not lines:
        raise ToolError(f"offset {offset} is past the end of {path!r} ({skipped} lines)")
    return "\n".join(lines)


def _existing_file(ctx: ToolContext, path: str) -> Path:
    target = resolve_in_workspace(ctx.workdir, path, must_exist=True, add_dirs=ctx.add_dirs)
    if target.is_dir():
        raise ToolError(f"{path!r} is a directory, not a file; use Glob or Bash `ls` to list it")
    if not target.is_file():
        raise ToolError(f"{path!r} is not a regular file")
    return target


def _next_line(f: BinaryIO) -> tuple[bytes, bool] | None:
    """The next line without its newline, at most _MAX_LINE_BYTES, and whether it was cut."""
    raw = f.readline(_MAX_LINE_BYTES)
    if not raw:
        return None
    cut = len(raw) == _MAX_LINE_BYTES and not raw.endswith(b"\n")
    # skip the rest of an overlong line without holding it
    while cut and (rest := f.readline(_COUNT_CHUNK)) and not rest.endswith(b"\n"):
        pass
    return raw.removesuffix(b"\n"), cut


def _numbered(number: int, raw: bytes, cut: bool) -> str:
    text = raw.decode("utf-8", "replace")
    if cut or len(text) > MAX_LINE_CHARS:
        text = f"{text[:MAX_LINE_CHARS]} [... line cut at {MAX_LINE_CHARS} characters]"
    return f"{number}\t{text}"


def _footer(f: BinaryIO, size: int, next_line: int) -> list[str]:
    left = size - f.tell()
    if left <= 0:
        return []
    if left > _COUNT_LIMIT:
        return [f"[... file continues for {left} more bytes; use offset={next_line} to continue]"]
    count, last = 0, b""
    while chunk := f.read(_COUNT_CHUNK):
        count += chunk.count(b"\n")
        last = chunk
    count += not last.endswith(b"\n")
    return [f"[... file has {count} more lines; use offset={next_line} to continue]"]


class WriteInput(msgspec.Struct, forbid_unknown_fields=True):
    file_path: Annotated[str, msgspec.Meta(description=_FILE_PATH)]
    content: Annotated[str, msgspec.Meta(description="The complete new content of the file.")]


class Write(Tool[WriteInput]):
    name = "Write"
    description = (
        "Create a file, or overwrite it, with the given content (UTF-8). Missing parent "
        "directories are created. To change part of an existing file, prefer Edit."
    )
    Input = WriteInput

    def execute(self, inp: WriteInput) -> str:
        path = inp.file_path
        target = resolve_in_workspace(
            self.ctx.workdir, path, must_exist=False, add_dirs=self.ctx.add_dirs
        )
        if target.is_dir():
            raise ToolError(f"{path!r} is a directory")
        data = inp.content.encode()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        except OSError as exc:
            raise ToolError(f"cannot write {path!r}: {exc.strerror or exc}") from None
        return f"wrote {len(data)} bytes to {path}"


class EditInput(msgspec.Struct, forbid_unknown_fields=True):
    file_path: Annotated[str, msgspec.Meta(description=_FILE_PATH)]
    old_string: Annotated[
        str, msgspec.Meta(description="The exact text to replace, including whitespace.")
    ]
    new_string: Annotated[str, msgspec.Meta(description="The text to replace it with.")]
    replace_all: Annotated[
        bool, msgspec.Meta(description="Replace every occurrence (default: exactly one).")
    ] = False


class Edit(Tool[EditInput]):
    name = "Edit"
    description = (
        "Replace exact text in a file. `old_string` must match the file exactly (whitespace "
        "and indentation included, without Read's line-number prefix) and, unless "
        "`replace_all` is set, occur exactly once: include enough surrounding lines to make "
        "it unique."
    )
    Input = EditInput

    def execute(self, inp: EditInput) -> str:
        path = inp.file_path
        if not inp.old_string:
            raise ToolError("old_string is empty; use Write to create or overwrite a file")
        if inp.old_string == inp.new_string:
            raise ToolError("old_string and new_string are the same; nothing to change")
        target = _existing_file(self.ctx, path)
        data = target.read_bytes()
        if looks_binary(data):
            raise ToolError(f"{path!r} is a binary file; use Bash to change it")
        # surrogateescape keeps bytes that are not UTF-8 exactly as they were
        text = data.decode("utf-8", "surrogateescape")
        count = text.count(inp.old_string)
        if count == 0:
            raise ToolError(f"old_string not found in {path}")
        if count > 1 and not inp.replace_all:
            raise ToolError(
                f"old_string occurs {count} times in {path}; "
                "add context to make it unique or set replace_all"
            )
        new = text.replace(inp.old_string, inp.new_string)
        try:
            target.write_bytes(new.encode("utf-8", "surrogateescape"))
        except OSError as exc:
            raise ToolError(f"cannot write {path!r}: {exc.strerror or exc}") from None
        return f"replaced {count} occurrence(s) in {path}"
