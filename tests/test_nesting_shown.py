"""Nested subagents (``--max-depth 2``) are shown as a tree: in ``-v``'s lines, in ``logs``
and in the timeline a child's child is under the child that started it; a batch's timeline
has a lane per task and none for a session with no agent; every tool call shows."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply

LEVEL_1, LEVEL_2, SIBLING = "level one", "level two", "a sibling"


def nesting(req: Request) -> Reply:
    """The parent asks for LEVEL_1 (general-purpose), then SIBLING; LEVEL_1 asks for LEVEL_2
    (Explore), which runs one command."""
    if req.first_user_text == LEVEL_2:
        if req.turn == 0:
            return tool_reply("Bash", {"command": "echo deep"})
        return text_reply("level 2 done")
    if req.first_user_text == LEVEL_1:
        if req.turn == 0:
            call = {"description": "d2", "prompt": LEVEL_2, "subagent_type": "Explore"}
            return tool_reply("Agent", call)
        return text_reply("level 1 done")
    if req.first_user_text == SIBLING:
        return text_reply("sibling done")
    if req.turn == 0:
        call = {"description": "d1", "prompt": LEVEL_1, "subagent_type": "general-purpose"}
        return tool_reply("Agent", call)
    if req.turn == 1:
        call = {"description": "d3", "prompt": SIBLING, "subagent_type": "Explore"}
        return tool_reply("Agent", call)
    return text_reply("all done")


def _nested_run(server: MessagesServer, tmp_path: Path) -> tuple[str, dict[str, str]]:
    server.handler = nesting
    env = cli_env(server)
    done = run_cli(["run", "go", "--max-depth", "2", "-v"], env, cwd=tmp_path, input="")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "all done\n"
    return done.stderr, env


def test_verbose_lines_indent_a_childs_child_under_it(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    stderr, _ = _nested_run(api_server, tmp_path)
    lines = stderr.splitlines()
    assert "    [Explore] d2: Bash echo deep" in lines
    assert re.search(r"^    \[Explore\] d2 - done \(1 tool, ", stderr, re.M)
    assert re.search(r"^  \[general-purpose\] d1 - done \(1 tool, ", stderr, re.M)
    assert re.search(r"^  \[Explore\] d3 - done \(0 tools, ", stderr, re.M)  # a sibling of d1


def test_logs_shows_a_childs_child_under_it(api_server: MessagesServer, tmp_path: Path) -> None:
    _, env = _nested_run(api_server, tmp_path)
    tree = run_cli(["logs", "last"], env, cwd=tmp_path).stdout.splitlines()
    children = [(line, n) for n, line in enumerate(tree) if " child 00" in line]
    shown = [(line.split("child ")[0], line.split()[1], line.split()[3]) for line, _ in children]
    assert shown == [
        ("    ", "001", "'d1':"),
        ("        ", "002", "'d2':"),  # under d1, deeper
        ("    ", "003", "'d3':"),
    ], tree
    under_d1 = tree[children[0][1] : children[2][1]]
    assert any("Bash" in line and line.startswith("          ") for line in under_d1)


def test_the_timeline_draws_a_childs_child_under_it_and_every_tool_call(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    _, env = _nested_run(api_server, tmp_path)
    page = tmp_path / "run.html"
    assert run_cli(["logs", "last", "--html", "-o", str(page)], env, cwd=tmp_path).returncode == 0
    html = page.read_text()
    agents = re.findall(r'<g class="bar" data-agent="([^"]+)">\n<text x="(\d+)"', html)
    assert agents == [
        ("parent", "8"),
        ("001 general-purpose", "8"),
        ("002 Explore", "23"),  # indented under 001
        ("003 Explore", "8"),
    ], agents
    tools = re.findall(r'width="([\d.]+)" height="20" fill="#f59e0b"', html)
    assert len(tools) == 1 and float(tools[0]) >= 3  # echo deep: too short to see, shown
    assert "general-purpose: d1" in html  # the name in full, not cut to a narrow column


def test_a_batchs_timeline_has_a_lane_per_task_and_no_empty_session_lane(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = lambda req: text_reply("done")
    env = cli_env(api_server)
    (tmp_path / "tasks.txt").write_text("one\ntwo\n")
    assert run_cli(["batch", "tasks.txt", "-o", "out.jsonl"], env, cwd=tmp_path).returncode == 0
    page = tmp_path / "run.html"
    assert run_cli(["logs", "last", "--html", "-o", str(page)], env, cwd=tmp_path).returncode == 0
    lanes = re.findall(r'<g class="bar" data-agent="([^"]+)"', page.read_text())
    assert lanes == ["001 general-purpose", "002 general-purpose"]
