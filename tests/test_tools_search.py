"""Glob on real directory trees in a temporary workspace (Grep: test_tools_grep.py)."""

from __future__ import annotations

import os
from pathlib import Path

from isoagent.child.agent.tools.base import ToolContext, ToolOutput
from isoagent.child.agent.tools.search import MAX_GLOB_RESULTS, Glob


def glob(ws: Path, pattern: str, **args) -> ToolOutput:
    return Glob(ToolContext(ws)).run({"pattern": pattern, **args})


def make(ws: Path, *names: str, mtime: float | None = None) -> None:
    for name in names:
        path = ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"content of {name}\n")
        if mtime is not None:
            os.utime(path, (mtime, mtime))


# --- Glob ---------------------------------------------------------------------


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
