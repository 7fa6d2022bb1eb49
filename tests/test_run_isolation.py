"""`isoagent run` end to end: the child is a separate process with a clean context."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from isoagent.child.agent.process_tree import PPID, stat_fields
from tests.conftest import cli_env
from tests.support.cli import read_jsonl, run_cli, run_dirs, start_cli, started_children
from tests.support.messages_server import (
    MessagesServer,
    Reply,
    Request,
    text_reply,
    tool_reply,
    tools_reply,
)
from tests.support.processes import wait_for

SECRET = "the-secret-file-content-7f3a"


def delegate(agent: str, child_steps: list[Reply], summary_prefix: str = "Parent answer: "):
    """A handler: the parent delegates once; the child plays ``child_steps``, then summarises."""

    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn == 0:
                return tool_reply(
                    "Agent",
                    {"description": "look around", "prompt": "inspect", "subagent_type": agent},
                )
            return text_reply(summary_prefix + req.tool_results[0]["content"])
        if req.turn < len(child_steps):
            return child_steps[req.turn]
        return text_reply(f"CHILD SUMMARY after {req.turn} turns")

    return handler


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "secret.txt").write_text(SECRET)
    (tmp_path / "test_x.py").write_text("import pytest\n")
    return tmp_path


def test_child_context_is_fresh_and_only_its_summary_reaches_the_parent(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler = delegate("Explore", [tool_reply("Read", {"file_path": "secret.txt"})])
    done = run_cli(["run", "what is in secret.txt?"], cli_env(api_server), cwd=workspace)
    assert done.returncode == 0, done.stderr

    child = [r for r in api_server.requests if not r.is_parent]
    parent = [r for r in api_server.requests if r.is_parent]
    assert len(child[0].messages) == 1
    assert child[0].first_user_text == "inspect"
    assert "Agent" not in child[0].tool_names
    assert SECRET in child[1].text()  # the child did read it ...
    assert all(SECRET not in r.text() for r in parent)  # ... the parent never saw it
    assert "CHILD SUMMARY after 1 turns" in done.stdout
    assert done.stdout.startswith("Parent answer: ")
    assert "[Explore] look around - done" in done.stderr
    assert "[Explore]" not in done.stdout  # progress lines stay on stderr


def test_child_runs_in_its_own_process_under_the_cli_without_credentials(
    api_server: MessagesServer, workspace: Path
) -> None:
    # the command waits while the test walks the child's ancestors (its own pid namespace
    # shows none of them), then shows the child's environment
    held = workspace / "held"
    probe = f"touch {held}; while [ -e {held} ]; do sleep 0.05; done; echo ENVIRONMENT; env"
    api_server.handler = delegate("general-purpose", [tool_reply("Bash", {"command": probe})])
    env = cli_env(api_server, ANTHROPIC_AUTH_TOKEN="token-xyz")
    cli = start_cli(["run", "probe"], env, cwd=workspace)
    try:
        assert wait_for(held.exists, 60), "the child's command never ran"
        [child] = started_children(workspace)
        ancestry = [child]
        while ancestry[-1] > 1:
            ancestry.append(int(stat_fields(ancestry[-1])[PPID]))
        held.unlink()
        _, stderr = cli.communicate(timeout=60)
    finally:
        cli.kill()
    assert cli.returncode == 0, stderr
    # the chain reaches this test through the CLI (fork server children: through it too)
    assert ancestry.index(cli.pid) >= 1 and os.getpid() in ancestry, ancestry
    output = next(r for r in api_server.requests if not r.is_parent and r.turn == 1)
    text = output.tool_results[0]["content"]
    # the child's own environment (ancestors above this test are the harness's business)
    environment = text.partition("ENVIRONMENT\n")[2]
    assert "ISOAGENT_DEPTH=1" in environment
    for secret in ("test-key", "token-xyz", "ANTHROPIC"):
        assert secret not in environment


def test_child_transcript_holds_the_whole_conversation(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler = delegate("Explore", [tool_reply("Read", {"file_path": "secret.txt"})])
    done = run_cli(["run", "go"], cli_env(api_server), cwd=workspace)
    assert done.returncode == 0, done.stderr

    (run,) = run_dirs(workspace)
    (transcript,) = run.glob("child-001-Explore.jsonl")
    events = read_jsonl(transcript)
    assert [e["type"] for e in events] == [
        "child_started",
        "message",  # the task prompt
        "message",  # Read call
        "message",  # its result
        "message",  # the summary
        "child_result",
    ]
    assert SECRET in events[3]["content"][0]["content"]
    assert events[-1]["result"]["status"] == "ok"
    assert str(transcript.relative_to(workspace)) in done.stdout


def test_large_tool_output_is_truncated_before_any_model_sees_it(
    api_server: MessagesServer, workspace: Path
) -> None:
    flood = "python3 -c \"import sys; sys.stdout.write('x' * 50_000_000)\"; echo END"
    api_server.handler = delegate("general-purpose", [tool_reply("Bash", {"command": flood})])
    done = run_cli(["run", "flood"], cli_env(api_server), cwd=workspace, timeout=120)
    assert done.returncode == 0, done.stderr

    result = next(r for r in api_server.requests if not r.is_parent and r.turn == 1)
    content = result.tool_results[0]["content"]
    assert len(content) < 40_000
    assert "truncated" in content and content.rstrip().endswith("END")
    assert all(len(r.text()) < 50_000 for r in api_server.requests)


def test_parallel_task_calls_run_in_separate_processes(
    api_server: MessagesServer, workspace: Path
) -> None:
    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn == 0:
                calls = [
                    ("Agent", {"description": f"job {n}", "prompt": f"job {n}",
                              "subagent_type": "Explore"})
                    for n in range(3)
                ]  # fmt: skip
                return tools_reply(calls)
            return text_reply(" | ".join(r["content"] for r in req.tool_results))
        if req.turn == 0:
            return tool_reply("Bash", {"command": "echo RAN-IT"}, delay=0.3)
        return text_reply(req.tool_results[0]["content"].strip())

    api_server.handler = handler
    done = run_cli(["run", "fan out", "--max-parallel", "3"], cli_env(api_server), cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("RAN-IT") == 3
    assert len(set(started_children(workspace))) == 3  # three processes
    assert api_server.max_in_flight_where(lambda r: not r.is_parent) == 3


def test_parent_commands_do_not_see_the_api_credentials(
    api_server: MessagesServer, workspace: Path
) -> None:
    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("Bash", {"command": "env; echo ISOAGENT_SEEN=$ISOAGENT_CHILD_TAG"})
        return text_reply(req.tool_results[0]["content"])

    api_server.handler = handler
    env = cli_env(api_server, ANTHROPIC_AUTH_TOKEN="token-xyz", MY_SETTING="kept")
    done = run_cli(["run", "env"], env, cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert "test-key" not in done.stdout and "token-xyz" not in done.stdout
    # the allow-list a child's commands get, not the rest of the user's environment
    assert "MY_SETTING" not in done.stdout and "HOME=" in done.stdout
    assert "ISOAGENT_SEEN=run-" in done.stdout


def test_thinking_goes_back_to_the_api_unchanged_with_the_tool_results(
    api_server: MessagesServer, workspace: Path
) -> None:
    """Models that think by default reject a tool result whose turn lost its thinking."""
    thinking = {"type": "thinking", "thinking": "I should list files.", "signature": "sig-1"}
    step = tool_reply("Bash", {"command": "echo hi"})
    step.content.insert(0, thinking)
    api_server.handler = delegate("general-purpose", [step])
    done = run_cli(["run", "think first"], cli_env(api_server), cwd=workspace)
    assert done.returncode == 0, done.stderr

    child = [r for r in api_server.requests if not r.is_parent]
    assert child[1].messages[1]["role"] == "assistant"
    assert child[1].messages[1]["content"][0] == thinking
    (run,) = run_dirs(workspace)
    (transcript,) = run.glob("*general-purpose*.jsonl")
    assert "sig-1" in transcript.read_text()  # the transcript keeps it too
