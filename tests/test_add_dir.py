"""``--add-dir DIR``: another folder the agents use as they use the workspace, by their
file tools and, through the child's Landlock sandbox, by every command they run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import isoagent
from isoagent.child.agent.tools.base import ToolError
from isoagent.child.agent.tools.workspace import resolve_in_workspace
from isoagent.parent.children.sandbox_policy import landlock_available, mount_namespaces_available
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tools_reply

needs_landlock = pytest.mark.skipif(not landlock_available(), reason="kernel has no Landlock")

Calls = list[tuple[str, dict[str, Any]]]


def child_calls(calls: Calls) -> Callable[[Request], Reply]:
    """The child makes ``calls`` in one turn, then answers with every result, one a line,
    each marked ERR or OK."""

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tools_reply(calls)
        lines = [f"{'ERR' if r.get('is_error') else 'OK'} {r['content']}" for r in req.tool_results]
        return text_reply("\n".join(lines))

    return handler


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The workspace, an added folder holding notes.txt, and a folder outside both."""
    workspace, added, outside = tmp_path / "ws", tmp_path / "added", tmp_path / "outside"
    for path in (workspace, added, outside):
        path.mkdir()
    (added / "notes.txt").write_text("added notes\n")
    (outside / "secret.txt").write_text("outside secret\n")
    return workspace, added, outside


def task(
    server: MessagesServer, workspace: Path, agent: str, *args: str
) -> tuple[int, list[str], str]:
    done = run_cli(["task", "--agent", agent, "go", *args], cli_env(server), cwd=workspace)
    return done.returncode, done.stdout.splitlines(), done.stderr


def test_file_tools_write_in_an_added_dir_and_refuse_paths_outside_every_root(
    api_server: MessagesServer, dirs: tuple[Path, Path, Path]
) -> None:
    workspace, added, outside = dirs
    api_server.handler = child_calls(
        [
            ("Write", {"file_path": str(added / "new.txt"), "content": "written"}),
            ("Read", {"file_path": str(added / "notes.txt")}),
            ("Write", {"file_path": str(outside / "new.txt"), "content": "escaped"}),
            ("Read", {"file_path": str(outside / "secret.txt")}),
            ("Read", {"file_path": "../outside/secret.txt"}),
        ]
    )
    code, lines, stderr = task(api_server, workspace, "general-purpose", "--add-dir", str(added))
    assert code == 0, stderr
    assert (added / "new.txt").read_text() == "written"
    assert lines[0].startswith("OK wrote 7 bytes")
    assert lines[1].startswith("OK") and "added notes" in lines[1]
    assert not (outside / "new.txt").exists()
    for line in lines[2:5]:
        assert line.startswith("ERR") and "outside the workspace and the added folders" in line
    assert "outside secret" not in "\n".join(lines)


def test_a_symlink_in_an_added_dir_does_not_lead_out(dirs: tuple[Path, Path, Path]) -> None:
    workspace, added, outside = dirs
    (added / "link").symlink_to(outside)
    assert resolve_in_workspace(
        workspace, str(added / "notes.txt"), must_exist=True, add_dirs=[added]
    ) == (added / "notes.txt")
    with pytest.raises(ToolError, match="outside the workspace and the added folders"):
        resolve_in_workspace(
            workspace, str(added / "link" / "secret.txt"), must_exist=True, add_dirs=[added]
        )
    with pytest.raises(ToolError, match="outside the workspace"):
        resolve_in_workspace(workspace, str(added / "notes.txt"), must_exist=True)


@needs_landlock
def test_a_writing_child_writes_in_added_dirs_only_even_through_bash(
    api_server: MessagesServer, dirs: tuple[Path, Path, Path]
) -> None:
    workspace, added, outside = dirs
    command = (
        f"echo in > {added}/bash.txt && echo IN-OK; "
        f"echo ws > ws.txt && echo WS-OK; "
        f"echo out > {outside}/bash.txt && echo OUT-OK; true"
    )
    api_server.handler = child_calls([("Bash", {"command": command})])
    code, lines, stderr = task(api_server, workspace, "general-purpose", "--add-dir", str(added))
    output = "\n".join(lines)
    assert code == 0, stderr
    assert (added / "bash.txt").read_text() == "in\n"
    assert (workspace / "ws.txt").read_text() == "ws\n"
    assert not (outside / "bash.txt").exists()
    assert "IN-OK" in output and "WS-OK" in output and "OUT-OK" not in output
    assert "Permission denied" in output


@needs_landlock
def test_a_read_only_child_reads_an_added_dir_but_cannot_write_there(
    api_server: MessagesServer, dirs: tuple[Path, Path, Path]
) -> None:
    workspace, added, _ = dirs
    api_server.handler = child_calls(
        [
            ("Read", {"file_path": str(added / "notes.txt")}),
            ("Bash", {"command": f"cat {added}/notes.txt; touch {added}/x && echo WROTE; true"}),
        ]
    )
    code, lines, stderr = task(api_server, workspace, "Explore", "--add-dir", str(added))
    output = "\n".join(lines)
    assert code == 0, stderr
    assert lines[0].startswith("OK") and "added notes" in lines[0]
    assert output.count("added notes") == 2
    assert "WROTE" not in output and "Permission denied" in output
    assert not (added / "x").exists()


@needs_landlock
@pytest.mark.skipif(not mount_namespaces_available(), reason="no mount namespace for children here")
def test_git_in_an_added_dir_stays_read_only_unless_writable_git(
    api_server: MessagesServer, dirs: tuple[Path, Path, Path]
) -> None:
    workspace, added, _ = dirs
    (added / ".git").mkdir()
    api_server.handler = child_calls(
        [("Bash", {"command": f"echo hook > {added}/.git/hook && echo HOOKED; true"})]
    )
    code, lines, stderr = task(api_server, workspace, "general-purpose", "--add-dir", str(added))
    assert code == 0, stderr
    assert "HOOKED" not in "\n".join(lines)
    assert not (added / ".git" / "hook").exists()
    more = ("--add-dir", str(added), "--writable-git")
    code, lines, stderr = task(api_server, workspace, "general-purpose", *more)
    assert code == 0, stderr
    assert (added / ".git" / "hook").read_text() == "hook\n"


@pytest.mark.parametrize("command", [["-p", "go"], ["run", "go"], ["task", "go"]])
def test_a_missing_add_dir_is_a_one_line_usage_error(
    api_server: MessagesServer, tmp_path: Path, command: list[str]
) -> None:
    missing = tmp_path / "nope"
    done = run_cli([*command, "--add-dir", str(missing)], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"isoagent: --add-dir {missing}: does not exist")
    assert len(done.stderr.splitlines()) == 1
    assert not api_server.requests


def test_a_file_as_add_dir_is_refused_by_the_python_api(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(isoagent.IsoagentError, match="is not a directory"):
        isoagent.task("go", workdir=tmp_path, add_dirs=[tmp_path / "file"])
