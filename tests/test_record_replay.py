"""--record / --replay: a recorded run replays with no server, no key, in any directory."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import zlib
from pathlib import Path

import msgspec
import pytest

from isoagent.parent.model.cassette import CassetteError, Recorded, ReplaySource
from isoagent.protocol import (
    Message,
    ModelCall,
    ModelReply,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from tests.conftest import base_env, cli_env
from tests.support.cli import read_jsonl, run_cli
from tests.support.messages_server import MessagesServer, Request, text_reply, tool_reply


def offline_env(tmp_path: Path) -> dict[str, str]:
    """No ANTHROPIC_* variables at all: a replay needs no key and no server."""
    return base_env(HOME=str(tmp_path / "home"))


def online_env(server: MessagesServer, tmp_path: Path) -> dict[str, str]:
    return cli_env(server, HOME=str(tmp_path / "home"))


def isoagent(*args: str | Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli([str(a) for a in args], env, cwd=cwd, timeout=90)


def delegating(request: Request):
    """The parent delegates reading notes.txt to an Explore child and repeats its summary."""
    if request.is_parent:
        if request.turn == 0:
            return tool_reply(
                "Agent",
                {
                    "description": "read notes",
                    "prompt": "Read notes.txt",
                    "subagent_type": "Explore",
                },
            )
        return text_reply("Parent: " + request.tool_results[0]["content"].splitlines()[0])
    if request.turn == 0:
        return tool_reply("Read", {"file_path": "notes.txt"})
    return text_reply("notes: " + request.tool_results[0]["content"].replace("\n", " | "))


def reading(request: Request):
    """The parent alone reads notes.txt and quotes it."""
    if request.turn == 0:
        return tool_reply("Read", {"file_path": "notes.txt"})
    return text_reply("quoted: " + request.tool_results[0]["content"].replace("\n", " | "))


def workspace(root: Path, name: str = "ws") -> Path:
    ws = root / name
    ws.mkdir()
    (ws / "notes.txt").write_text("alpha\nbeta\n")
    return ws


def record_run(
    server: MessagesServer, tmp_path: Path, prompt: str = "Summarize the notes"
) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    ws = workspace(tmp_path)
    cassette = tmp_path / "run.cassette.jsonl"
    done = isoagent(
        "run", prompt, "-C", ws, "--record", cassette, env=online_env(server, tmp_path), cwd=ws
    )
    assert done.returncode == 0, done.stderr
    return ws, cassette, done


def messages_of(transcript: Path) -> list[tuple[str, str]]:
    """(role, content as JSON) of every message event in a transcript."""
    events = read_jsonl(transcript)
    return [(e["role"], json.dumps(e["content"])) for e in events if e["type"] == "message"]


def last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


# --- record, then replay a run -------------------------------------------------------


def test_recording_writes_each_call_as_it_completes(api_server: MessagesServer, tmp_path):
    cassette = tmp_path / "run.cassette.jsonl"
    lines_seen: list[int] = []

    def handler(request: Request):
        lines_seen.append(len(cassette.read_bytes().splitlines()))
        return delegating(request)

    api_server.handler = handler
    _, cassette, _ = record_run(api_server, tmp_path)
    assert lines_seen == [0, 1, 2, 3]
    decoder = msgspec.json.Decoder(Recorded)
    entries = [decoder.decode(line) for line in cassette.read_bytes().splitlines()]
    assert [(e.request.agent, e.request.turn) for e in entries] == [
        ("parent", 0),
        ("Explore", 0),
        ("Explore", 1),
        ("parent", 1),
    ]
    assert [len(e.request.messages) for e in entries] == [
        len(r.messages) for r in api_server.requests
    ]
    assert entries[2].response.content == [TextBlock("notes: " + "1\talpha | 2\tbeta")]


def test_replayed_run_gives_the_same_answer_with_no_server_and_no_key(
    api_server: MessagesServer, tmp_path
):
    api_server.handler = delegating
    ws, cassette, recorded = record_run(api_server, tmp_path)
    api_server.stop()
    moved = shutil.copytree(ws, tmp_path / "elsewhere", ignore=shutil.ignore_patterns(".isoagent"))

    replayed = isoagent(
        "run",
        "Summarize the notes",
        "-C",
        moved,
        "--replay",
        cassette,
        env=offline_env(tmp_path),
        cwd=tmp_path,
    )

    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout == "Parent: notes: 1\talpha | 2\tbeta\n"
    [before] = (ws / ".isoagent" / "runs").glob("*/child-001-Explore.jsonl")
    [after] = (moved / ".isoagent" / "runs").glob("*/child-001-Explore.jsonl")
    assert messages_of(after) == messages_of(before)


def test_parent_only_run_replays_strictly_from_another_directory(api_server, tmp_path):
    api_server.handler = reading
    _, cassette, recorded = record_run(api_server, tmp_path)
    api_server.stop()
    other = workspace(tmp_path, "other")  # the system prompt names another directory

    replayed = isoagent(
        "run",
        "Summarize the notes",
        "-C",
        other,
        "--replay",
        cassette,
        "--replay-match",
        "strict",
        env=offline_env(tmp_path),
        cwd=other,
    )

    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout


# --- misses -------------------------------------------------------------------------


def test_strict_replay_miss_names_the_first_differing_message(api_server, tmp_path):
    api_server.handler = reading
    ws, cassette, recorded = record_run(api_server, tmp_path)
    (ws / "notes.txt").write_text("alpha\ngamma\n")

    strict = isoagent(
        "run", "Summarize the notes", "--replay", cassette, env=offline_env(tmp_path), cwd=ws
    )
    loose = isoagent(
        "run",
        "Summarize the notes",
        "--replay",
        cassette,
        "--replay-match",
        "loose",
        env=offline_env(tmp_path),
        cwd=ws,
    )

    assert strict.returncode == 1
    assert "Traceback" not in strict.stderr
    line = last_line(strict.stderr)
    assert line.startswith("isoagent: error: model call failed: replay miss in ")
    assert "(agent 'parent', turn 1): message 3 differs" in line
    assert "tool_result differs at character" in line
    assert "gamma" in line and "beta" in line
    assert "--replay-match loose would ignore it" in line
    assert loose.returncode == 0, loose.stderr
    assert loose.stdout == recorded.stdout  # the recorded answer, whatever the tool said


def test_child_replay_miss_is_the_runs_error(api_server, tmp_path):
    api_server.handler = delegating
    ws, cassette, _ = record_run(api_server, tmp_path)
    (ws / "notes.txt").write_text("gamma\n")

    replayed = isoagent(
        "run", "Summarize the notes", "--replay", cassette, env=offline_env(tmp_path), cwd=ws
    )

    assert replayed.returncode == 1
    line = last_line(replayed.stderr)
    assert re.match(
        r"isoagent: error: model call failed: replay miss in \S+ \(agent 'Explore', turn 1\): "
        r"message 3 differs from the closest recorded call: user block 1: tool_result differs",
        line,
    ), line


def test_prompt_not_in_the_recording_is_a_miss_at_message_1(api_server, tmp_path):
    api_server.handler = reading
    ws, cassette, _ = record_run(api_server, tmp_path)

    replayed = isoagent(
        "run",
        "Summarize the notes, please",
        "--replay",
        cassette,
        env=offline_env(tmp_path),
        cwd=ws,
    )

    assert replayed.returncode == 1
    line = last_line(replayed.stderr)
    assert "(agent 'parent', turn 0): message 1 differs" in line
    assert "text differs at character 20: now 'Summarize the notes, please'" in line


def test_damaged_recording_is_one_clear_line(tmp_path):
    cassette = tmp_path / "bad.jsonl"
    cassette.write_text('{"request": {}}\n')

    done = isoagent("run", "hi", "--replay", cassette, env=offline_env(tmp_path), cwd=tmp_path)

    assert done.returncode == 1
    assert done.stderr.startswith(f"isoagent: {cassette}:1: not a recorded model call")
    assert len(done.stderr.strip().splitlines()) == 1


# --- matching by conversation, in-process ----------------------------------------------


def _call(agent: str, prompt: str, *later: Message) -> ModelCall:
    messages = [Message("user", [TextBlock(prompt)]), *later]
    turn = sum(m.role == "assistant" for m in messages)
    return ModelCall(turn, "m", 100, "system", messages, agent=agent)


def _cassette(path: Path, pairs: list[tuple[ModelCall, str]]) -> Path:
    encoder = msgspec.json.Encoder()
    lines = [
        encoder.encode(Recorded(call, ModelReply(call.turn, [TextBlock(answer)])))
        for call, answer in pairs
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _answer(source: ReplaySource, call: ModelCall) -> str:
    reply = asyncio.run(source.complete(call))
    if reply.error is not None:
        return "miss: " + reply.error.message
    [block] = reply.content
    assert isinstance(block, TextBlock)
    return block.text


def test_replies_follow_the_conversation_not_the_arrival_order(tmp_path):
    calls = [_call("Explore", f"task {n}") for n in range(5)]
    source = ReplaySource(
        _cassette(
            tmp_path / "c.jsonl", [(c, f"answer {c.messages[0].content[0].text}") for c in calls]
        )
    )  # type: ignore[union-attr]

    answers = {n: _answer(source, calls[n]) for n in (3, 0, 4, 2, 1)}

    assert answers == {n: f"answer task {n}" for n in range(5)}


def test_identical_conversations_take_replies_in_recorded_order(tmp_path):
    call = _call("Explore", "same task")
    source = ReplaySource(_cassette(tmp_path / "c.jsonl", [(call, "first"), (call, "second")]))

    answers = [_answer(source, call) for _ in range(3)]

    assert answers[:2] == ["first", "second"]
    assert answers[2].endswith("every recorded reply to this conversation has been used")


def test_loose_match_ignores_tool_output_but_not_failure(tmp_path):
    uses = Message(
        "assistant",
        [
            ToolUseBlock("t1", "Bash", {"command": "date"}),
            ToolUseBlock("t2", "Bash", {"command": "ls"}),
        ],
    )

    def results(date: str, listing: str, listing_failed: bool = False) -> Message:
        return Message(
            "user", [ToolResultBlock("t1", date), ToolResultBlock("t2", listing, listing_failed)]
        )

    recorded = _call("parent", "what time is it", uses, results("Mon 10:00", "a b"))
    source = ReplaySource(_cassette(tmp_path / "c.jsonl", [(recorded, "ten")] * 2), "loose")

    same = _answer(source, _call("parent", "what time is it", uses, results("Tue 11:30", "c")))
    failed = _answer(source, _call("parent", "what time is it", uses, results("?", "no", True)))

    assert same == "ten"
    assert failed.startswith("miss: ")
    assert failed.endswith(
        "message 3 differs from the closest recorded call: "
        "user block 2: tool_result is an error, recorded not an error"
    )


def test_agent_missing_from_the_recording_is_named(tmp_path):
    source = ReplaySource(_cassette(tmp_path / "c.jsonl", [(_call("parent", "hi"), "hello")]))

    answer = _answer(source, _call("Plan", "hi"))

    assert answer.endswith(
        "(agent 'Plan', turn 0): the recording has no call of this agent (it has 'parent')"
    )


def test_empty_recording_is_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")

    with pytest.raises(CassetteError, match="holds no recorded model calls"):
        ReplaySource(tmp_path / "empty.jsonl")


# --- batch -----------------------------------------------------------------------------


def _batch_child(request: Request):
    """Each task reads its own file; replies are delayed so tasks finish out of order."""
    name = re.search(r"\w+\.txt", request.first_user_text)
    assert name is not None
    delay = (zlib.crc32(name.group().encode()) % 5) / 20
    if request.turn == 0:
        return tool_reply("Read", {"file_path": name.group()}, delay=delay)
    return text_reply(f"{name.group()}: " + request.tool_results[0]["content"].strip(), delay=delay)


def _batch_results(stdout: str) -> dict[str, tuple]:
    records = [json.loads(line) for line in stdout.splitlines()]
    return {
        r["id"]: (r["status"], r["summary"], r["turns"], r["tool_calls"], r["tokens"], r["error"])
        for r in records
    }


def test_batch_replay_matches_the_recording_whatever_order_children_run_in(
    api_server: MessagesServer, tmp_path
):
    ws = tmp_path / "ws"
    ws.mkdir()
    ids = [f"t{n}" for n in range(8)]
    for n, task_id in enumerate(ids):
        (ws / f"{task_id}.txt").write_text(f"contents of file {n}\n")
    tasks = [
        json.dumps({"id": i, "prompt": f"Read {i}.txt and report it", "agent": "Explore"})
        for i in ids
    ]
    (tmp_path / "tasks.jsonl").write_text("\n".join(tasks) + "\n")
    (tmp_path / "reversed.jsonl").write_text("\n".join(reversed(tasks)) + "\n")
    cassette = tmp_path / "batch.cassette.jsonl"
    api_server.handler = _batch_child

    recorded = isoagent(
        "batch",
        tmp_path / "tasks.jsonl",
        "-j",
        "4",
        "-C",
        ws,
        "--record",
        cassette,
        env=online_env(api_server, tmp_path),
        cwd=tmp_path,
    )
    api_server.stop()
    replays = [
        isoagent(
            "batch",
            tmp_path / name,
            "-j",
            jobs,
            "-C",
            ws,
            "--replay",
            cassette,
            env=offline_env(tmp_path),
            cwd=tmp_path,
        )
        for name, jobs in (("tasks.jsonl", "4"), ("reversed.jsonl", "4"), ("reversed.jsonl", "1"))
    ]

    assert recorded.returncode == 0, recorded.stderr
    expected = _batch_results(recorded.stdout)
    assert sorted(expected) == ids
    assert all(r[0] == "ok" for r in expected.values())
    assert expected["t3"][1] == "t3.txt: 1\tcontents of file 3"
    assert len(cassette.read_bytes().splitlines()) == 2 * len(ids)
    for replay in replays:
        assert replay.returncode == 0, replay.stderr
        assert _batch_results(replay.stdout) == expected
