"""Every file tool refuses paths outside the workspace: ``..``, absolute paths, symlinks; and
takes an absolute path inside it, as Claude Code's file tools take them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from isoagent.child.agent.tools.base import ToolContext, ToolError, ToolOutput
from isoagent.child.agent.tools.files import Edit, Read, Write
from isoagent.child.agent.tools.grep import Grep
from isoagent.child.agent.tools.search import Glob
from isoagent.child.agent.tools.workspace import resolve_in_workspace

SECRET = "TOPSECRET"

Call = Callable[[ToolContext, str], ToolOutput]

CALLS: dict[str, Call] = {
    "Read": lambda ctx, p: Read(ctx).run({"file_path": p}),
    "Write": lambda ctx, p: Write(ctx).run({"file_path": p, "content": "PWNED"}),
    "Edit": lambda ctx, p: Edit(ctx).run(
        {"file_path": p, "old_string": SECRET, "new_string": "PWNED"}
    ),
    "Glob": lambda ctx, p: Glob(ctx).run({"pattern": "**/*", "path": p}),
    "Grep": lambda ctx, p: Grep(ctx).run({"pattern": SECRET, "path": p, "output_mode": "content"}),
}

ESCAPES = [
    "..",
    "../outside",
    "../outside/secret.txt",
    "sub/../../outside/secret.txt",
    "{outside}/secret.txt",
    "{outside}",
    "/",
    "{ws}/../outside/secret.txt",
    "{ws}/link_dir/secret.txt",
    "{ws}/sub/link_up/outside/secret.txt",
    "link_file",
    "link_dir",
    "link_dir/secret.txt",
    "sub/link_up/outside/secret.txt",
    "dangling",
    "link_dir/new.txt",
]


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace ``ws`` next to a directory ``outside`` it must never reach."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{SECRET}\n")
    (ws / "link_file").symlink_to(outside / "secret.txt")
    (ws / "link_dir").symlink_to(outside)
    (ws / "sub" / "link_up").symlink_to("../..")
    (ws / "dangling").symlink_to(outside / "new.txt")
    return ws, outside


def outside_untouched(outside: Path) -> bool:
    return (
        sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
        and (outside / "secret.txt").read_text() == f"{SECRET}\n"
    )


@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize("tool", CALLS)
def test_file_tools_refuse_paths_outside_the_workspace(
    layout: tuple[Path, Path], tool: str, escape: str
) -> None:
    ws, outside = layout
    path = escape.format(outside=outside, ws=ws)
    out = CALLS[tool](ToolContext(ws), path)
    assert out == ToolOutput(f"path {path!r} is outside the workspace", is_error=True)
    assert outside_untouched(outside)


@pytest.mark.parametrize("tool", ["Read", "Edit"])
def test_read_file_refuses_symlink_escape(layout: tuple[Path, Path], tool: str) -> None:
    ws, outside = layout
    out = CALLS[tool](ToolContext(ws), "link_file")
    assert out.is_error
    assert SECRET not in out.text
    assert outside_untouched(outside)


def test_write_file_refuses_dotdot(layout: tuple[Path, Path]) -> None:
    ws, outside = layout
    out = CALLS["Write"](ToolContext(ws), "../outside/new.txt")
    assert out == ToolOutput("path '../outside/new.txt' is outside the workspace", is_error=True)
    assert outside_untouched(outside)


@pytest.mark.parametrize("tool", ["Glob", "Grep"])
def test_search_walks_do_not_follow_symlinks_out(layout: tuple[Path, Path], tool: str) -> None:
    ws, _ = layout
    (ws / "sub" / "mine.txt").write_text(f"{SECRET} copy\n")
    out = CALLS[tool](ToolContext(ws), ".")
    assert not out.is_error
    assert "secret.txt" not in out.text
    assert out.text in ("sub/mine.txt", f"sub/mine.txt:1:{SECRET} copy")


def test_symlink_inside_the_workspace_is_allowed(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    (ws / "real.txt").write_text("hello\n")
    (ws / "sub" / "alias.txt").symlink_to("../real.txt")
    assert CALLS["Read"](ToolContext(ws), "sub/alias.txt") == ToolOutput("1\thello")


def test_names_starting_with_dots_are_not_escapes(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    (ws / "..notes").write_text("fine\n")
    assert CALLS["Read"](ToolContext(ws), "..notes") == ToolOutput("1\tfine")


def test_workspace_reached_through_a_symlink_still_works(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    (ws / "a.txt").write_text("a\n")
    alias = ws.parent / "alias"
    alias.symlink_to(ws)
    ctx = ToolContext(alias)
    assert CALLS["Read"](ctx, "a.txt") == ToolOutput("1\ta")
    assert CALLS["Read"](ctx, str(alias / "a.txt")) == ToolOutput("1\ta")
    assert CALLS["Glob"](ctx, ".").text.split("\n")[0] == "a.txt"


def test_file_tools_take_an_absolute_path_inside_the_workspace(
    layout: tuple[Path, Path],
) -> None:
    """Claude Code's models give ``file_path`` absolute: it works as the relative one does."""
    ws, _ = layout
    ctx = ToolContext(ws)
    path = str(ws / "sub" / "notes.txt")
    assert Write(ctx).run({"file_path": path, "content": f"{SECRET}\n"}) == ToolOutput(
        f"wrote 10 bytes to {path}"
    )
    assert Edit(ctx).run({"file_path": path, "old_string": SECRET, "new_string": "mine"}) == (
        ToolOutput(f"replaced 1 occurrence(s) in {path}")
    )
    assert Read(ctx).run({"file_path": path}) == ToolOutput("1\tmine")
    assert CALLS["Glob"](ctx, str(ws / "sub")).text == "sub/notes.txt"
    assert Grep(ctx).run({"pattern": "mine", "path": str(ws)}).text == "Found 1 file\nsub/notes.txt"


def test_resolve_in_workspace_returns_the_real_path(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    assert resolve_in_workspace(ws, "sub/x/../new.txt", must_exist=False) == ws / "sub/new.txt"
    assert resolve_in_workspace(ws, "", must_exist=True) == ws
    with pytest.raises(ToolError, match="'nope' does not exist"):
        resolve_in_workspace(ws, "nope", must_exist=True)
    with pytest.raises(ToolError, match="invalid path"):
        resolve_in_workspace(ws, "a\0b", must_exist=False)
