"""A write that fails (a full disk, a closed reader, a descriptor not open for writing) on
stdout, stderr or ``--record`` is one line on stderr and a non-zero exit, never a traceback;
a failed run leaves stdout empty."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support.cli import read_jsonl, run_cli, shell
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply

FULL = "isoagent: cannot write to stdout: No space left on device"


def isoagent_lines(stderr: str) -> list[str]:
    """What isoagent said on stderr, without the progress lines."""
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("isoagent:")]


@pytest.mark.parametrize(
    "command",
    [
        "--help",
        "agents",
        "logs",
        "task hi",
        "task hi --output-format json",
        "task hi --output-format stream-json",
        "run hi",
        "-p hi",
        "-p hi --output-format stream-json --verbose",
    ],
)
def test_stdout_on_a_full_disk_is_one_line_and_exit_1(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, command: str
) -> None:
    env = cli_env(api_server)
    run_cli(["task", "make a run for logs", "-C", str(workspace)], env, cwd=tmp_path)
    done = shell(
        f"cd {shlex.quote(str(workspace))} && isoagent {command} > /dev/full", env, tmp_path
    )
    assert done.returncode == 1, done.stderr
    assert isoagent_lines(done.stderr) == [FULL]


def test_stdout_open_only_for_reading_is_one_line_and_exit_1(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    done = shell(
        f"isoagent task hi -C {shlex.quote(str(workspace))} 1</dev/null",
        cli_env(api_server),
        tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert isoagent_lines(done.stderr) == ["isoagent: cannot write to stdout: Bad file descriptor"]


def test_stderr_on_a_full_disk_ends_the_run_non_zero_silently(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    done = shell(
        f"isoagent task hi -C {shlex.quote(str(workspace))} 2>/dev/full",
        cli_env(api_server),
        tmp_path,
    )
    assert done.returncode == 1
    assert done.stdout == "ok\n"  # the answer still came
    assert done.stderr == ""


def test_a_recording_that_cannot_be_written_fails_the_run_in_one_line(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    done = run_cli(
        ["task", "hi", "-C", str(workspace), "--record", "/dev/full"],
        cli_env(api_server),
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert isoagent_lines(done.stderr) == [
        "isoagent: error: model call failed: cannot write the recording /dev/full: "
        "No space left on device"
    ]


def delegating(req: Request) -> Reply:
    """The parent says something, then delegates; the child answers."""
    if req.is_parent and req.turn == 0:
        task = {"description": "look", "prompt": "look", "subagent_type": "Explore"}
        return tool_reply("Agent", task, text="I will delegate.", usage=(100, 100))
    if req.is_parent:
        return text_reply("the answer", usage=(100, 100))
    return text_reply("found it", usage=(100, 100))


def test_a_run_that_runs_out_of_budget_prints_no_partial_answer(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = delegating
    done = run_cli(
        ["run", "go", "--max-tokens-total", "300", "-C", str(workspace)],
        cli_env(api_server),
        cwd=tmp_path,
    )
    assert done.returncode == 5, done.stderr
    assert done.stdout == ""
    assert "budget" in done.stderr


def test_a_strict_replay_miss_prints_no_partial_answer(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = delegating
    env = cli_env(api_server)
    base = ["run", "go", "-C", str(workspace)]
    recorded = run_cli([*base, "--record", "calls.jsonl"], env, cwd=tmp_path)
    assert recorded.stdout == "the answer\n", recorded.stderr
    calls = read_jsonl(tmp_path / "calls.jsonl")
    child = next(c for c in calls if c["request"]["messages"][0]["content"][0]["text"] == "look")
    child["request"]["messages"][0]["content"][0]["text"] = "look elsewhere"  # it now misses
    (tmp_path / "calls.jsonl").write_text("".join(f"{json.dumps(c)}\n" for c in calls))

    done = run_cli([*base, "--replay", "calls.jsonl"], env, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert "replay" in done.stderr or "recorded" in done.stderr


def test_a_batch_whose_recording_fails_makes_no_further_model_call(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    (tmp_path / "tasks.txt").write_text("one\ntwo\nthree\n")
    done = run_cli(
        ["batch", "tasks.txt", "-j", "1", "-C", str(workspace), "--record", "/dev/full"],
        cli_env(api_server),
        cwd=tmp_path,
    )
    assert done.returncode == 6, done.stderr
    assert len(api_server.requests) == 1  # paid for once, never again
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["status"] for r in records] == ["error"] * 3
    assert all("cannot write the recording /dev/full" in r["error"] for r in records)
