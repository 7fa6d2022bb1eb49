"""A child that dies or misbehaves gives the parent model a clear tool result; the run goes on."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import cli_env
from tests.support.cli import kill_child_once, run_cli
from tests.support.messages_server import MessagesServer, text_reply, tool_reply
from tests.support.scripts import delegating


def test_child_killed_with_sigkill_gives_a_clear_tool_result(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    dying = tmp_path / "dying"
    api_server.handler = delegating(
        [tool_reply("Bash", {"command": f"echo about to die >&2; touch {dying}; sleep 30"})]
    )
    killer = kill_child_once(dying.exists, tmp_path)
    done = run_cli(["run", "go"], cli_env(api_server), cwd=tmp_path)
    killer.join()
    assert done.returncode == 0, done.stderr
    assert "error=True" in done.stdout
    assert "crashed" in done.stdout and "SIGKILL" in done.stdout
    assert "transcript .isoagent/runs/" in done.stdout
    assert "risky - crashed" in done.stderr


def test_child_crash_reports_exit_code_and_last_stderr(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    crash = tmp_path / "crash.py"
    crash.write_text(
        "import sys\nprint('boom: missing dependency', file=sys.stderr)\nsys.exit(7)\n"
    )
    api_server.handler = delegating([text_reply("never")])
    env = cli_env(api_server, ISOAGENT_CHILD_COMMAND=f"{sys.executable} {crash}")
    done = run_cli(["run", "go"], env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "exited before saying Hello (exit code 7)" in done.stdout
    assert "boom: missing dependency" in done.stdout


def test_child_that_writes_garbage_is_a_clear_failure(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    garbage = tmp_path / "garbage.py"
    garbage.write_text(
        "import os, time\nos.write(1, b'hello, I am not a frame\\n')\ntime.sleep(30)\n"
    )
    api_server.handler = delegating([text_reply("never")])
    env = cli_env(api_server, ISOAGENT_CHILD_COMMAND=f"{sys.executable} {garbage}")
    done = run_cli(["run", "go"], env, cwd=tmp_path, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "corrupt frame" in done.stdout


def test_child_reply_cut_off_at_max_tokens_is_an_error_not_an_answer(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    cut = text_reply("The three modules are: first, the")
    cut.stop_reason = "max_tokens"
    api_server.handler = delegating([cut])
    done = run_cli(["run", "go"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "error=True" in done.stdout
    assert "cut off at max_tokens (16384)" in done.stdout
    assert "The three modules are: first, the" in done.stdout  # what it had is kept
    child = next(r for r in api_server.requests if not r.is_parent)
    assert child.body["max_tokens"] == 16384


def test_child_tool_call_cut_off_at_max_tokens_is_not_run(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    cut = tool_reply("Write", {"file_path": "half.txt", "content": "the first half"})
    cut.stop_reason = "max_tokens"
    api_server.handler = delegating([cut])
    done = run_cli(["run", "go"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "cut off at max_tokens" in done.stdout
    assert not (tmp_path / "half.txt").exists()


def test_child_at_its_turn_limit_returns_what_it_has(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = delegating(
        [tool_reply("Bash", {"command": "echo again"}, text="still looking")]
    )
    done = run_cli(["run", "go", "--max-turns", "3"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "error=False" in done.stdout
    assert "max_turns" in done.stdout and "turn limit (3)" in done.stdout
    assert "still looking" in done.stdout


def test_child_timeout_ends_it_and_keeps_what_it_had_said(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = delegating(
        [tool_reply("Bash", {"command": "sleep 60"}, text="found half of it")]
    )
    done = run_cli(["run", "go", "--timeout", "2"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "timeout" in done.stdout and "timed out after 2 s" in done.stdout
    assert "found half of it" in done.stdout  # the child's Result after Cancel


def test_child_that_finishes_exits_by_itself(api_server: MessagesServer, tmp_path: Path) -> None:
    api_server.handler = delegating([text_reply("all good")])
    done = run_cli(["run", "go", "--output-format", "json"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (child,) = json.loads(done.stdout)["children"]
    assert child["exit_code"] == 0 and child["result"]["status"] == "ok"
