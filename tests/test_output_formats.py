"""``--output-format text|json|stream-json`` of ``run`` and ``task``: the transcripts' shapes."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import msgspec
import pytest

from isoagent.parent.events import AnyEvent, ChildFinished, MessageAdded, RunFinished
from tests.conftest import cli_env
from tests.support.cli import ISOAGENT, run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply

decode_event = msgspec.json.Decoder(AnyEvent).decode


def delegating(req: Request) -> Reply:
    """The parent hands one task to an Explore child, then answers with its summary."""
    if req.is_parent:
        if req.turn == 0:
            return tool_reply(
                "task",
                {"description": "look around", "prompt": "list files", "subagent_type": "Explore"},
                text="Delegating.",
            )
        return text_reply("Final answer: " + req.tool_results[0]["content"].splitlines()[0])
    if req.turn == 0:
        return tool_reply("glob", {"pattern": "*"})
    return text_reply("one file: a.txt")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "a.txt").write_text("a\n")
    return path


def run(server: MessagesServer, args: list[str], workspace: Path) -> subprocess.CompletedProcess:
    server.handler = delegating
    done = run_cli([*args, "-C", str(workspace)], cli_env(server), cwd=workspace, input="")
    assert done.returncode == 0, done.stderr
    return done


def test_text_prints_only_the_answer(api_server: MessagesServer, workspace: Path) -> None:
    done = run(api_server, ["run", "what is here?"], workspace)
    assert done.stdout == "Final answer: one file: a.txt\n"
    assert "[Explore] look around" in done.stderr  # progress stays on stderr


def test_json_prints_one_result_object_with_child_records(
    api_server: MessagesServer, workspace: Path
) -> None:
    done = run(api_server, ["run", "what is here?", "--output-format", "json"], workspace)
    assert len(done.stdout.splitlines()) == 1
    final = msgspec.json.decode(done.stdout, type=RunFinished)
    assert final.result.status == "ok"
    assert final.result.summary == "Final answer: one file: a.txt"
    assert final.result.turns == 2
    assert final.result.usage.input_tokens == 20 and final.result.duration > 0
    [child] = final.children
    assert child.agent == "Explore" and child.description == "look around"
    assert child.result.summary == "one file: a.txt" and child.result.tool_calls == 1
    assert (workspace / child.transcript).is_file()
    plain = json.loads(done.stdout)  # what jq sees
    assert plain["type"] == "result" and plain["result"]["status"] == "ok"


def test_stream_json_has_every_event_in_order_in_the_transcript_shapes(
    api_server: MessagesServer, workspace: Path
) -> None:
    done = run(api_server, ["run", "what is here?", "--output-format", "stream-json"], workspace)
    events = [decode_event(line) for line in done.stdout.splitlines()]
    kinds = [json.loads(line)["type"] for line in done.stdout.splitlines()]
    assert kinds[0] == "init" and kinds[-1] == "result"
    order = ["init", "child_started", "child_progress", "child_result", "result"]
    assert [kinds.index(kind) for kind in order] == sorted(kinds.index(kind) for kind in order)
    parent_text = [
        e for e in events if isinstance(e, MessageAdded) and e.child == "" and e.role == "assistant"
    ]
    assert parent_text[0].content[0].text == "Delegating."  # type: ignore[union-attr]
    assert isinstance(events[-1], RunFinished)
    assert events[-1].result.summary == "Final answer: one file: a.txt"

    # the child's transcript holds the same lines as the stream, byte for byte
    [finished] = [e for e in events if isinstance(e, ChildFinished)]
    transcript = (workspace / finished.transcript).read_text().splitlines()
    child_lines = [
        line for line in done.stdout.splitlines() if json.loads(line).get("child") == "001"
    ]
    child_lines = [line for line in child_lines if json.loads(line)["type"] != "child_progress"]
    assert transcript == child_lines


def test_task_json_and_stream_json(api_server: MessagesServer, workspace: Path) -> None:
    api_server.handler = lambda req: text_reply("summary only")
    env = cli_env(api_server)
    args = ["task", "go", "-C", str(workspace), "--output-format"]
    done = run_cli([*args, "json"], env, cwd=workspace, input="")
    assert done.returncode == 0, done.stderr
    final = msgspec.json.decode(done.stdout, type=RunFinished)
    assert final.result.summary == "summary only"
    assert [c.result.summary for c in final.children] == ["summary only"]

    done = run_cli([*args, "stream-json"], env, cwd=workspace, input="")
    assert done.returncode == 0, done.stderr
    kinds = [json.loads(line)["type"] for line in done.stdout.splitlines()]
    assert kinds[0] == "init" and kinds[1] == "child_started" and kinds[-1] == "result"
    assert "child_result" in kinds


def test_stream_json_into_a_closed_pipe_ends_quietly(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler = lambda req: text_reply("x" * 100_000)
    command = shlex.join([*ISOAGENT, "task", "go", "--output-format", "stream-json"])
    done = subprocess.run(
        ["bash", "-c", f"{command} | head -c 10; echo; echo status ${{PIPESTATUS[0]}}"],
        env=cli_env(api_server),
        cwd=workspace,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.startswith('{"type":"i')
    assert done.stdout.endswith("status 0\n")
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
