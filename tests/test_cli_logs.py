"""``isoagent logs``: the runs of a workspace, and one run as a tree read from its transcripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from isoagent.parent.model.prices import cost_usd
from isoagent.protocol import Usage
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply


def delegating(req: Request) -> Reply:
    """A parent of two turns and a child of two, each answer with usage of its own."""
    if req.is_parent:
        if req.turn == 0:
            return tool_reply(
                "Agent",
                {"description": "look around", "prompt": "list files", "subagent_type": "Explore"},
                usage=(200, 40),
            )
        return text_reply("PARENT-ANSWER", usage=(230, 10))
    if req.turn == 0:
        return tool_reply("Glob", {"pattern": "*.txt"}, usage=(150, 30))
    return text_reply("CHILD-SUMMARY", usage=(170, 10))


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
    assert "ok, 4 turns, 2 tool calls" in oldest and ", 1 child " in oldest  # the child's too
    assert "ok, 1 turn, 0 tool calls" in newest and ", 1 child " in newest

    run_id = oldest.split()[0]
    tree = run_cli(["logs", run_id[:-2]], env, cwd=tmp_path)
    assert tree.returncode == 0, tree.stderr
    lines = tree.stdout.splitlines()
    assert lines[0].startswith(f"run {run_id}: ok, 4 turns, 2 tool calls, ")
    assert "  prompt: what is here?" in lines
    child = next(i for i, line in enumerate(lines) if "child 001 Explore 'look around': ok" in line)
    task_call = next(i for i, line in enumerate(lines) if line.startswith("    Agent {"))
    assert task_call < child  # the child under the task call that started it
    assert lines[child].startswith("    child")
    assert any(line.startswith("        Glob ") and "*.txt" in line for line in lines)
    assert any("CHILD-SUMMARY" in line for line in lines[child:])
    assert lines[-1].strip() == "PARENT-ANSWER"

    last = run_cli(["logs", "last"], env, cwd=tmp_path)
    assert "just one" in last.stdout


def test_logs_of_an_unknown_run_is_one_clear_line(tmp_path: Path) -> None:
    done = run_cli(["logs", "nope"], {"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("isoagent: no run matching 'nope'")
    assert "Traceback" not in done.stderr


def transcripts_usage(run: Path) -> tuple[int, float]:
    """Tokens and cost of every answer in the run folder's JSONL files, read as plain JSON."""
    tokens, cost = 0, 0.0
    for transcript in run.glob("*.jsonl"):
        model = ""
        for line in transcript.read_text().splitlines():
            event = json.loads(line)
            if event["type"] in ("init", "child_started"):
                model = event["model"]
            if event["type"] == "message" and "usage" in event:
                usage = Usage(**event["usage"])
                tokens += usage.total
                cost += cost_usd(event.get("model") or model, usage)
    return tokens, cost


@pytest.fixture
def delegated(api_server: MessagesServer, tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A finished ``run`` whose parent delegated once: its environment and run folder."""
    api_server.handler = delegating
    env = cli_env(api_server)
    assert run_cli(["run", "how many?"], env, cwd=tmp_path, input="").returncode == 0
    return env, next((tmp_path / ".isoagent" / "runs").iterdir())


def test_logs_totals_are_every_agents_tokens_as_the_transcripts_count_them(
    delegated: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    env, run = delegated
    tokens, cost = transcripts_usage(run)
    assert tokens == 240 + 240 + 180 + 180  # the parent's 480, the child's 360

    listing = run_cli(["logs"], env, cwd=tmp_path).stdout
    assert f", {tokens} tokens, ${cost:.4f}, " in listing
    tree = run_cli(["logs", "last"], env, cwd=tmp_path).stdout.splitlines()
    assert f", {tokens} tokens, " in tree[0]
    child = next(line for line in tree if line.startswith("    child 001"))
    assert ": ok, 2 turns, 1 tool call, 360 tokens, " in child
    listed = json.loads(run_cli(["logs", "--json"], env, cwd=tmp_path).stdout)
    assert [(r["tokens"], r["cost_usd"]) for r in listed] == [(tokens, round(cost, 6))]


def test_logs_json_holds_each_agents_transcript_as_written(
    delegated: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    env, run = delegated
    shown = json.loads(run_cli(["logs", run.name, "--json"], env, cwd=tmp_path).stdout)
    listed = json.loads(run_cli(["logs", "--json"], env, cwd=tmp_path).stdout)
    assert {k: v for k, v in shown.items() if k != "agents"} == listed[0]
    assert shown["label"] == "how many?" and shown["children"] == 1
    parent, child = shown["agents"]
    for agent, name in ((parent, "run.jsonl"), (child, "child-001-Explore.jsonl")):
        lines = (run / name).read_text().splitlines()
        assert agent["events"] == [json.loads(line) for line in lines]
        assert all("timestamp" in event for event in agent["events"])
    assert (parent["tokens"], child["tokens"]) == (480, 360)
    assert child["status"] == "ok" and child["tool_calls"] == 1


def test_logs_shows_a_childs_timeout_on_its_run(api_server: MessagesServer, tmp_path: Path) -> None:
    def hanging_child(req: Request) -> Reply:
        if not req.is_parent:
            return tool_reply("Bash", {"command": "sleep 60"})
        return delegating(req)

    api_server.handler = hanging_child
    env = cli_env(api_server)
    done = run_cli(["run", "go", "--timeout", "1"], env, cwd=tmp_path, input="")
    assert done.returncode == 0, done.stderr
    line = run_cli(["logs"], env, cwd=tmp_path).stdout
    assert line.split()[1:2] == ["ok,"] and ", 1 child (1 timeout)  go" in line
    tree = run_cli(["logs", "last"], env, cwd=tmp_path).stdout.splitlines()
    assert "  1 child not ok: 1 timeout" in tree
    assert any(line.startswith("    child 001 Explore 'look around': timeout,") for line in tree)
    assert "      error: child timed out after 1 s" in tree


def test_logs_full_shows_whole_tool_inputs_and_outputs(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    command = "echo " + "x" * 100 + " END-OF-COMMAND; echo SECOND-LINE"

    def echoing(req: Request) -> Reply:
        if req.is_parent:
            return delegating(req)
        if req.turn == 0:
            return tool_reply("Bash", {"command": command})
        return text_reply("CHILD-SUMMARY")

    api_server.handler = echoing
    env = cli_env(api_server)
    assert run_cli(["run", "go"], env, cwd=tmp_path, input="").returncode == 0
    short = run_cli(["logs", "last"], env, cwd=tmp_path).stdout
    assert "END-OF-COMMAND" not in short and "SECOND-LINE" not in short
    assert '        Bash {"command": "echo xxx' in short
    full = run_cli(["logs", "last", "--full"], env, cwd=tmp_path).stdout.splitlines()
    assert f'               "command": {json.dumps(command)}' in full  # the input whole
    output = full.index("        -> " + "x" * 100 + " END-OF-COMMAND")
    assert full[output + 1] == "           SECOND-LINE"  # every line of the output


def test_logs_names_a_batch_run_by_its_input_file(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    (tmp_path / "tasks.txt").write_text("first prompt\nsecond prompt\n")
    env = cli_env(api_server)
    done = run_cli(["batch", "tasks.txt"], env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = run_cli(["logs"], env, cwd=tmp_path).stdout
    assert line.endswith("2 children  batch tasks.txt\n") and "first prompt" not in line
    listed = json.loads(run_cli(["logs", "--json"], env, cwd=tmp_path).stdout)
    assert listed[0]["batch_input"] == "tasks.txt" and listed[0]["label"] == "batch tasks.txt"
