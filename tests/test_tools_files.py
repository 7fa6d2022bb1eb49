"""Read, Write and Edit (Claude Code's file tools) on real files in a temporary workspace."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest

from isoagent.child.agent.tools import TOOL_CLASSES, make_tools
from isoagent.child.agent.tools.base import ToolContext, ToolOutput
from isoagent.child.agent.tools.files import Edit, Read, Write


def read(ws: Path, path: str, **args) -> ToolOutput:
    return Read(ToolContext(ws)).run({"file_path": path, **args})


def write(ws: Path, path: str, content: str) -> ToolOutput:
    return Write(ToolContext(ws)).run({"file_path": path, "content": content})


def edit(ws: Path, path: str, old: str, new: str, **args) -> ToolOutput:
    tool = Edit(ToolContext(ws))
    return tool.run({"file_path": path, "old_string": old, "new_string": new, **args})


# --- Read ---------------------------------------------------------------------


def test_read_file_numbers_lines_like_cat_n(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    assert read(tmp_path, "a.txt") == ToolOutput("1\tone\n2\ttwo")


def test_read_file_last_line_without_newline(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo")
    assert read(tmp_path, "a.txt").text == "1\tone\n2\ttwo"


def test_read_file_absolute_path_inside_workspace(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x\n")
    assert read(tmp_path, str(tmp_path / "a.txt")).text == "1\tx"


def test_read_file_offset_and_limit_with_continue_footer(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = read(tmp_path, "a.txt", offset=3, limit=2)
    assert out.text == (
        "3\tline 3\n4\tline 4\n[... file has 6 more lines; use offset=5 to continue]"
    )


def test_read_file_default_limit_is_2000_lines(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("".join(f"{i}\n" for i in range(1, 3001)))
    lines = read(tmp_path, "a.txt").text.split("\n")
    assert len(lines) == 2001
    assert lines[-2] == "2000\t2000"
    assert lines[-1] == "[... file has 1000 more lines; use offset=2001 to continue]"


def test_read_file_no_footer_when_page_ends_at_end_of_file(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\nb\n")
    assert read(tmp_path, "a.txt", limit=2).text == "1\ta\n2\tb"


def test_read_file_offset_past_end_is_error(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\nb\n")
    out = read(tmp_path, "a.txt", offset=3)
    assert out.is_error
    assert "offset 3 is past the end" in out.text
    assert "(2 lines)" in out.text


def test_read_file_offset_zero_is_the_first_line_and_a_negative_one_invalid(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.txt").write_text("a\nb\n")
    assert (
        read(tmp_path, "a.txt", offset=0, limit=1).text
        == "1\ta\n[... file has 1 more lines; use offset=2 to continue]"
    )
    assert read(tmp_path, "a.txt", offset=-1).is_error


def test_read_file_long_line_is_cut(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x" * 50_000 + "\nnext\n")
    lines = read(tmp_path, "a.txt").text.split("\n")
    assert lines[0] == "1\t" + "x" * 2000 + " [... line cut at 2000 characters]"
    assert lines[1] == "2\tnext"


def test_read_file_long_multibyte_line_is_cut_at_characters(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("é" * 3000 + "\n")
    line = read(tmp_path, "a.txt").text
    assert line == "1\t" + "é" * 2000 + " [... line cut at 2000 characters]"


def test_read_file_binary_is_clear_message(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"\x7fELF\0\0\1" + bytes(100))
    out = read(tmp_path, "blob.bin")
    assert out == ToolOutput(
        "'blob.bin' is a binary file (107 bytes); use Bash (e.g. xxd, file) to inspect it",
        is_error=True,
    )


def test_read_file_non_utf8_text_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    assert read(tmp_path, "latin1.txt").text == "1\tcaf\ufffd"


def test_read_file_missing_is_clear_error(tmp_path: Path) -> None:
    assert read(tmp_path, "nope.txt") == ToolOutput("'nope.txt' does not exist", is_error=True)


def test_read_file_directory_is_clear_error(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    out = read(tmp_path, "sub")
    assert out.is_error
    assert "'sub' is a directory" in out.text


def test_read_file_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    out = read(tmp_path, "pipe")
    assert out == ToolOutput("'pipe' is not a regular file", is_error=True)


def test_read_file_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty").touch()
    assert read(tmp_path, "empty") == ToolOutput("(empty file)")


def test_read_file_huge_file_reads_only_the_page(tmp_path: Path) -> None:
    line = "0123456789" * 10 + "\n"
    with (tmp_path / "big.txt").open("w") as f:
        for _ in range(200):
            f.write(line * 1000)  # 200,000 lines, about 20 MB
    tracemalloc.start()
    try:
        out = read(tmp_path, "big.txt", offset=100_001, limit=3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    lines = out.text.split("\n")
    assert lines[0].startswith("100001\t0123")
    assert lines[-1] == "[... file has 99997 more lines; use offset=100004 to continue]"
    assert peak < 2_000_000


# --- Write --------------------------------------------------------------------


def test_write_file_creates_file_and_parents(tmp_path: Path) -> None:
    out = write(tmp_path, "a/b/c.txt", "héllo\n")
    assert out == ToolOutput("wrote 7 bytes to a/b/c.txt")
    assert (tmp_path / "a/b/c.txt").read_text() == "héllo\n"


def test_write_file_overwrites(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("old content")
    write(tmp_path, "a.txt", "new")
    assert (tmp_path / "a.txt").read_text() == "new"


def test_write_file_onto_directory_is_error(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    assert write(tmp_path, "sub", "x") == ToolOutput("'sub' is a directory", is_error=True)


def test_write_file_under_a_file_is_clear_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    out = write(tmp_path, "f/x.txt", "x")
    assert out.is_error
    assert out.text.startswith("cannot write 'f/x.txt'")


# --- Edit ---------------------------------------------------------------------


def test_edit_file_replaces_unique_string(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def f():\n    return 1\n")
    out = edit(tmp_path, "a.py", "return 1", "return 2")
    assert out == ToolOutput("replaced 1 occurrence(s) in a.py")
    assert (tmp_path / "a.py").read_text() == "def f():\n    return 2\n"


def test_edit_file_not_unique_is_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x = 1\nx = 1\n")
    out = edit(tmp_path, "a.txt", "x = 1", "x = 2")
    assert out == ToolOutput(
        "old_string occurs 2 times in a.txt; add context to make it unique or set replace_all",
        is_error=True,
    )
    assert (tmp_path / "a.txt").read_text() == "x = 1\nx = 1\n"


def test_edit_file_replace_all(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x = 1\nx = 1\n")
    out = edit(tmp_path, "a.txt", "x = 1", "x = 2", replace_all=True)
    assert out == ToolOutput("replaced 2 occurrence(s) in a.txt")
    assert (tmp_path / "a.txt").read_text() == "x = 2\nx = 2\n"


def test_edit_file_not_found_is_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("abc")
    out = edit(tmp_path, "a.txt", "zzz", "y")
    assert out == ToolOutput("old_string not found in a.txt", is_error=True)


def test_edit_file_same_strings_is_error(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("abc")
    out = edit(tmp_path, "a.txt", "abc", "abc")
    assert out.is_error
    assert "the same" in out.text


def test_edit_file_empty_old_string_is_error(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("abc")
    out = edit(tmp_path, "a.txt", "", "x")
    assert out.is_error
    assert "old_string is empty" in out.text


def test_edit_file_missing_file_is_clear_error(tmp_path: Path) -> None:
    assert edit(tmp_path, "nope", "a", "b") == ToolOutput("'nope' does not exist", is_error=True)


def test_edit_file_keeps_non_utf8_bytes_and_crlf(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"caf\xe9\r\nold\r\n")
    assert not edit(tmp_path, "a.txt", "old", "new").is_error
    assert (tmp_path / "a.txt").read_bytes() == b"caf\xe9\r\nnew\r\n"


def test_edit_file_binary_is_refused(tmp_path: Path) -> None:
    (tmp_path / "b.bin").write_bytes(b"old\0")
    out = edit(tmp_path, "b.bin", "old", "new")
    assert out.is_error
    assert "binary" in out.text


# --- registry -----------------------------------------------------------------


def test_make_tools_builds_named_tools_sharing_the_context(tmp_path: Path) -> None:
    ctx = ToolContext(tmp_path)
    tools = make_tools(["Read", "Bash"], ctx)
    assert [tool.name for tool in tools] == ["Read", "Bash"]
    assert all(tool.ctx is ctx for tool in tools)


def test_make_tools_unknown_name_is_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown tool 'Agent'"):
        make_tools(["Bash", "Agent"], ToolContext(tmp_path))


def test_registry_has_the_base_tools_and_claude_codes_extras_with_strict_schemas() -> None:
    base = {"Bash", "Read", "Write", "Edit", "Glob", "Grep"}
    assert set(TOOL_CLASSES) == base | {"TodoWrite", "WebFetch", "WebSearch"}
    for name, cls in TOOL_CLASSES.items():
        assert cls.name == name
        spec = cls(ToolContext(Path("."))).spec
        if spec.type:  # a tool the API runs itself has no schema of ours
            continue
        schema = spec.input_schema
        assert schema["additionalProperties"] is False
        assert "$ref" not in json.dumps(schema)  # the API takes no references
        assert all(prop.get("description") for prop in schema["properties"].values())
    read_only = {name for name, cls in TOOL_CLASSES.items() if cls.parallel_safe}
    assert read_only == {"Read", "Glob", "Grep"}
