"""``isoagent logs``: the runs of a workspace, and one run as a tree read from its transcripts."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply


def delegating(req: Request) -> Reply:
    if req.is_parent:
        if req.turn == 0:
            return tool_reply(
                "task",
                {"description": "look around", "prompt": "list files", "subagent_type": "Explore"},
            )
        return text_reply("PARENT-ANSWER")
    if req.turn == 0:
        return tool_reply("glob", {"pattern": "*.txt"})
    return text_reply("CHILD-SUMMARY")


def test_logs_lists_runs_and_shows_one_as_a_tree(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("a")
    api_server.handler = delegating
    env = cli_env(api_server)
    assert run_cli(["run", "what is here?"], env, cwd=tmp_path, input="").returncode == 0
    api_server.handler = lambda req: text_reply("second")
    assert run_cli(["task", "just one"], env, cwd=tmp_path, input="").returncode == 0

    listing = run_cli(["logs"], env, cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    newest, oldest = listing.stdout.splitlines()
    assert "just one" in newest and "what is here?" in oldest
    assert "ok, 2 turns, 1 tool calls" in oldest and "1 child(ren)" in oldest

    run_id = oldest.split()[0]
    tree = run_cli(["logs", run_id[:-2]], env, cwd=tmp_path)
    assert tree.returncode == 0, tree.stderr
    lines = tree.stdout.splitlines()
    assert lines[0].startswith(f"run {run_id}: ok, 2 turns")
    assert "  prompt: what is here?" in lines
    child = next(i for i, line in enumerate(lines) if "child 001 Explore 'look around': ok" in line)
    task_call = next(i for i, line in enumerate(lines) if line.startswith("    task {"))
    assert task_call < child  # the child under the task call that started it
    assert lines[child].startswith("    child")
    assert any(line.startswith("        glob ") and "*.txt" in line for line in lines)
    assert any("CHILD-SUMMARY" in line for line in lines[child:])
    assert lines[-1].strip() == "PARENT-ANSWER"

    last = run_cli(["logs", "last"], env, cwd=tmp_path)
    assert "just one" in last.stdout


def test_logs_of_an_unknown_run_is_one_clear_line(tmp_path: Path) -> None:
    done = run_cli(["logs", "nope"], {"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("isoagent: no run matching 'nope'")
    assert "Traceback" not in done.stderr
