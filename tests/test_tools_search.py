"""glob and grep on real directory trees in a temporary workspace."""

from __future__ import annotations

import os
from pathlib import Path

from isoagent.child.agent.tools.base import ToolContext, ToolOutput
from isoagent.child.agent.tools.search import MAX_GLOB_RESULTS, MAX_GREP_MATCHES, Glob, Grep


def glob(ws: Path, pattern: str, **args) -> ToolOutput:
    return Glob(ToolContext(ws)).run({"pattern": pattern, **args})


def grep(ws: Path, pattern: str, **args) -> ToolOutput:
    return Grep(ToolContext(ws)).run({"pattern": pattern, **args})


def make(ws: Path, *names: str, mtime: float | None = None) -> None:
    for name in names:
        path = ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"content of {name}\n")
        if mtime is not None:
            os.utime(path, (mtime, mtime))


# --- glob ---------------------------------------------------------------------


def test_glob_double_star_matches_at_any_depth(tmp_path: Path) -> None:
    make(tmp_path, "a.py", "src/b.py", "src/deep/c.py", "src/d.txt", mtime=1000)
    assert glob(tmp_path, "**/*.py").text.split("\n") == ["a.py", "src/b.py", "src/deep/c.py"]


def test_glob_single_star_stays_in_one_directory(tmp_path: Path) -> None:
    make(tmp_path, "a.py", "src/b.py")
    assert glob(tmp_path, "*.py").text == "a.py"
    assert glob(tmp_path, "src/*.py").text == "src/b.py"


def test_glob_sorts_newest_first(tmp_path: Path) -> None:
    make(tmp_path, "old.py", mtime=1000)
    make(tmp_path, "new.py", mtime=3000)
    make(tmp_path, "mid.py", mtime=2000)
    assert glob(tmp_path, "*.py").text == "new.py\nmid.py\nold.py"


def test_glob_braces_expand_to_alternatives(tmp_path: Path) -> None:
    make(tmp_path, "a.ts", "b.tsx", "c.js", mtime=1000)
    assert glob(tmp_path, "*.{ts,tsx}").text == "a.ts\nb.tsx"


def test_glob_path_narrows_the_search_but_results_stay_workspace_relative(
    tmp_path: Path,
) -> None:
    make(tmp_path, "a.py", "src/b.py", "src/deep/c.py", mtime=1000)
    assert glob(tmp_path, "**/*.py", path="src").text == "src/b.py\nsrc/deep/c.py"


def test_glob_skips_git_directories(tmp_path: Path) -> None:
    make(tmp_path, ".git/config.py", "sub/.git/x.py", "keep.py")
    assert glob(tmp_path, "**/*.py").text == "keep.py"


def test_glob_no_match(tmp_path: Path) -> None:
    assert glob(tmp_path, "**/*.rs") == ToolOutput("No files found")


def test_glob_caps_results_with_marker(tmp_path: Path) -> None:
    for i in range(MAX_GLOB_RESULTS + 5):
        (tmp_path / f"f{i}.txt").touch()
    lines = glob(tmp_path, "*.txt").text.split("\n")
    assert len(lines) == MAX_GLOB_RESULTS + 1
    assert lines[-1] == "[... 5 more files not shown; use a narrower pattern or path]"


def test_glob_absolute_pattern_is_refused(tmp_path: Path) -> None:
    out = glob(tmp_path, "/etc/*")
    assert out.is_error
    assert "pattern must be relative" in out.text


def test_glob_path_that_is_a_file_is_error(tmp_path: Path) -> None:
    make(tmp_path, "a.py")
    assert glob(tmp_path, "*", path="a.py") == ToolOutput(
        "'a.py' is not a directory", is_error=True
    )


# --- grep ---------------------------------------------------------------------


def test_grep_reports_path_line_number_and_line(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import os\ndef main():\n    pass\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/b.py").write_text("def helper(): ...\n")
    out = grep(tmp_path, r"^\s*def ")
    assert out.text == "a.py:2:def main():\nsub/b.py:1:def helper(): ..."


def test_grep_ignore_case(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Hello\nhello\nHELLO\n")
    assert grep(tmp_path, "hello").text == "a.txt:2:hello"
    assert len(grep(tmp_path, "hello", ignore_case=True).text.split("\n")) == 3


def test_grep_glob_filters_files_by_name_at_any_depth(tmp_path: Path) -> None:
    for name in ("a.py", "a.txt", "src/b.py", "src/b.pyi"):
        make(tmp_path, name)
    out = grep(tmp_path, "content", glob="*.py")
    assert out.text == "a.py:1:content of a.py\nsrc/b.py:1:content of src/b.py"
    out = grep(tmp_path, "content", glob="src/*.{py,pyi}")
    assert out.text == "src/b.py:1:content of src/b.py\nsrc/b.pyi:1:content of src/b.pyi"


def test_grep_single_file_path(tmp_path: Path) -> None:
    make(tmp_path, "a.txt", "src/b.txt")
    assert grep(tmp_path, "content", path="src/b.txt").text == "src/b.txt:1:content of src/b.txt"


def test_grep_skips_binary_huge_and_git_files(tmp_path: Path) -> None:
    (tmp_path / "bin.dat").write_bytes(b"needle\0\1\2")
    (tmp_path / "huge.txt").write_bytes(b"needle\n" + b"x" * (11 * 1024 * 1024))
    make(tmp_path, ".git/config")
    (tmp_path / "ok.txt").write_text("needle\n")
    assert grep(tmp_path, "needle|config").text == "ok.txt:1:needle"


def test_grep_non_utf8_file_is_searched_with_replacement(tmp_path: Path) -> None:
    (tmp_path / "l1.txt").write_bytes("café needle\n".encode("latin-1"))
    assert grep(tmp_path, "needle").text == "l1.txt:1:caf\ufffd needle"


def test_grep_long_lines_are_cut(tmp_path: Path) -> None:
    (tmp_path / "min.js").write_text("needle" + "x" * 10_000 + "\n")
    out = grep(tmp_path, "needle").text
    assert out.endswith(" [... line cut]")
    assert len(out) < 600


def test_grep_caps_matches_with_marker(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hit\n" * (MAX_GREP_MATCHES + 10))
    lines = grep(tmp_path, "hit").text.split("\n")
    assert len(lines) == MAX_GREP_MATCHES + 1
    assert lines[-1].startswith(f"[... stopped after {MAX_GREP_MATCHES} matches")


def test_grep_no_match(tmp_path: Path) -> None:
    make(tmp_path, "a.txt")
    assert grep(tmp_path, "zzz") == ToolOutput("No matches found")


def test_grep_invalid_regex_is_error_with_re_message(tmp_path: Path) -> None:
    out = grep(tmp_path, "foo(")
    assert out.is_error
    assert out.text.startswith("invalid regex 'foo(': missing ), unterminated subpattern")


def test_grep_missing_path_is_error(tmp_path: Path) -> None:
    assert grep(tmp_path, "x", path="nope") == ToolOutput("'nope' does not exist", is_error=True)
