"""Grep, as Claude Code's: its output modes, context, paging and filters, on real files."""

from __future__ import annotations

import os
from pathlib import Path

from isoagent.child.agent.tools.base import ToolContext, ToolOutput
from isoagent.child.agent.tools.grep import DEFAULT_HEAD_LIMIT, Grep


def grep(ws: Path, pattern: str, **args: object) -> ToolOutput:
    return Grep(ToolContext(ws)).run({"pattern": pattern, **args})


def content(ws: Path, pattern: str, **args: object) -> str:
    out = grep(ws, pattern, output_mode="content", **args)
    assert not out.is_error, out.text
    return out.text


def make(ws: Path, name: str, text: str, mtime: float | None = None) -> None:
    path = ws / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def test_grep_lists_the_matching_files_newest_first_by_default(tmp_path: Path) -> None:
    make(tmp_path, "old.py", "needle\n", mtime=1000)
    make(tmp_path, "new.py", "a needle\n", mtime=3000)
    make(tmp_path, "none.py", "hay\n", mtime=2000)
    assert grep(tmp_path, "needle").text == "Found 2 files\nnew.py\nold.py"
    assert grep(tmp_path, "zzz") == ToolOutput("No files found")


def test_grep_content_reports_path_line_number_and_line(tmp_path: Path) -> None:
    make(tmp_path, "a.py", "import os\ndef main():\n    pass\n")
    make(tmp_path, "sub/b.py", "def helper(): ...\n")
    assert content(tmp_path, r"^\s*def ") == "a.py:2:def main():\nsub/b.py:1:def helper(): ..."
    assert content(tmp_path, r"^def h", **{"-n": False}) == "sub/b.py:def helper(): ..."
    assert content(tmp_path, "zzz") == "No matches found"


def test_grep_case_insensitive_with_dash_i(tmp_path: Path) -> None:
    make(tmp_path, "a.txt", "Hello\nhello\nHELLO\n")
    assert content(tmp_path, "hello") == "a.txt:2:hello"
    assert len(content(tmp_path, "hello", **{"-i": True}).split("\n")) == 3


def test_grep_context_lines_after_before_and_around_as_ripgrep_prints_them(
    tmp_path: Path,
) -> None:
    make(tmp_path, "a.txt", "".join(f"line {n}\n" for n in range(1, 11)))
    assert content(tmp_path, "line 3$", **{"-A": 1}) == "a.txt:3:line 3\na.txt-4-line 4"
    assert content(tmp_path, "line [38]$", **{"-B": 1}) == (
        "a.txt-2-line 2\na.txt:3:line 3\n--\na.txt-7-line 7\na.txt:8:line 8"
    )
    # groups that touch are one, with no separator; context and -C are the same
    around = content(tmp_path, "line [45]$", **{"-C": 1})
    assert around == content(tmp_path, "line [45]$", context=1)
    assert around == "a.txt-3-line 3\na.txt:4:line 4\na.txt:5:line 5\na.txt-6-line 6"
    make(tmp_path, "b.txt", "line 4\n")  # between files too
    assert content(tmp_path, "line 4$", **{"-A": 1}) == (
        "a.txt:4:line 4\na.txt-5-line 5\n--\nb.txt:1:line 4"
    )


def test_grep_count_mode_counts_matching_lines_per_file(tmp_path: Path) -> None:
    make(tmp_path, "a.txt", "hit\nmiss\nhit hit\n")
    make(tmp_path, "b.txt", "hit\n")
    out = grep(tmp_path, "hit", output_mode="count")
    assert out.text == "a.txt:2\nb.txt:1\n\nFound 3 total occurrences across 2 files."
    assert grep(tmp_path, "zzz", output_mode="count").text.startswith("No matches found")


def test_grep_head_limit_and_offset_page_through_the_entries(tmp_path: Path) -> None:
    make(tmp_path, "a.txt", "hit\n" * (DEFAULT_HEAD_LIMIT + 10))
    lines = content(tmp_path, "hit").split("\n")
    assert len(lines) == DEFAULT_HEAD_LIMIT + 2  # a blank line, and the note
    assert lines[-1] == (
        f"[Showing results with pagination = limit: {DEFAULT_HEAD_LIMIT}; "
        f"offset={DEFAULT_HEAD_LIMIT} continues]"
    )
    page = content(tmp_path, "hit", head_limit=2, offset=3)
    assert page == (
        "a.txt:4:hit\na.txt:5:hit\n\n"
        "[Showing results with pagination = limit: 2, offset: 3; offset=5 continues]"
    )
    assert len(content(tmp_path, "hit", head_limit=0).split("\n")) == DEFAULT_HEAD_LIMIT + 10
    tail = content(tmp_path, "hit", offset=DEFAULT_HEAD_LIMIT + 8)
    assert tail.split("\n")[:2] == [
        f"a.txt:{DEFAULT_HEAD_LIMIT + 9}:hit",
        f"a.txt:{DEFAULT_HEAD_LIMIT + 10}:hit",
    ]


def test_grep_multiline_matches_across_lines_only_when_asked(tmp_path: Path) -> None:
    make(tmp_path, "a.py", "class A:\n    x = 1\nclass B:\n    pass\n")
    assert content(tmp_path, r"class A:.*x = 1") == "No matches found"
    out = content(tmp_path, r"class A:.*?x = 1", multiline=True)
    assert out == "a.py:1:class A:\na.py:2:    x = 1"


def test_grep_only_matching_prints_the_matched_parts(tmp_path: Path) -> None:
    make(tmp_path, "a.txt", "id=12 and id=345\nnone\n")
    assert content(tmp_path, r"id=\d+", **{"-o": True}) == "a.txt:1:id=12\na.txt:1:id=345"


def test_grep_glob_and_type_filter_the_files(tmp_path: Path) -> None:
    for name in ("a.py", "a.txt", "src/b.py", "src/b.pyi"):
        make(tmp_path, name, f"content of {name}\n", mtime=1000)
    assert content(tmp_path, "content", glob="*.py") == (
        "a.py:1:content of a.py\nsrc/b.py:1:content of src/b.py"
    )
    assert content(tmp_path, "content", glob="src/*.{py,pyi}") == (
        "src/b.py:1:content of src/b.py\nsrc/b.pyi:1:content of src/b.pyi"
    )
    assert grep(tmp_path, "content", type="py").text == "Found 3 files\na.py\nsrc/b.py\nsrc/b.pyi"
    refused = grep(tmp_path, "content", type="cobol")
    assert refused.is_error and refused.text.startswith("unknown type 'cobol'; known: c, cpp")


def test_grep_a_single_file_prints_no_path_as_ripgrep(tmp_path: Path) -> None:
    make(tmp_path, "a.txt", "content\n")
    make(tmp_path, "src/b.txt", "x\ncontent of b\n")
    assert content(tmp_path, "content", path="src/b.txt") == "2:content of b"
    assert content(tmp_path, "content", path=str(tmp_path / "src/b.txt")) == "2:content of b"


def test_grep_skips_binary_huge_and_git_files(tmp_path: Path) -> None:
    (tmp_path / "bin.dat").write_bytes(b"needle\0\1\2")
    (tmp_path / "huge.txt").write_bytes(b"needle\n" + b"x" * (11 * 1024 * 1024))
    make(tmp_path, ".git/config", "needle\n")
    make(tmp_path, "ok.txt", "needle\n")
    assert content(tmp_path, "needle|config") == "ok.txt:1:needle"


def test_grep_non_utf8_file_is_searched_with_replacement(tmp_path: Path) -> None:
    (tmp_path / "l1.txt").write_bytes("café needle\n".encode("latin-1"))
    assert content(tmp_path, "needle") == "l1.txt:1:caf\ufffd needle"


def test_grep_long_lines_are_cut(tmp_path: Path) -> None:
    make(tmp_path, "min.js", "needle" + "x" * 10_000 + "\n")
    out = content(tmp_path, "needle")
    assert out.endswith(" [... line cut]")
    assert len(out) < 600


def test_grep_invalid_input_is_an_error_the_model_reads(tmp_path: Path) -> None:
    out = grep(tmp_path, "foo(")
    assert out.is_error
    assert out.text.startswith("invalid regex 'foo(': missing ), unterminated subpattern")
    assert grep(tmp_path, "x", path="nope") == ToolOutput("'nope' does not exist", is_error=True)
    assert grep(tmp_path, "x", output_mode="lines").is_error
    assert grep(tmp_path, "x", ignore_case=True).is_error  # isoagent's old name: not Claude Code's
