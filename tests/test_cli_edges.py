"""Hostile shells: prompts that are not UTF-8, a closed stdin, -o onto the input, broken pipes.

Each ends in one ``isoagent: ...`` line and a documented exit code, or in a run that works.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from io import FileIO
from pathlib import Path

import pytest

from isoagent.parent.records.events import MessageAdded
from isoagent.parent.records.run_folder import TranscriptWriter
from isoagent.protocol import TextBlock
from tests.conftest import cli_env
from tests.support.cli import ISOAGENT, read_jsonl, run_cli, shell
from tests.support.messages_server import MessagesServer, error_reply, text_reply

NOT_UTF8 = os.fsdecode(b"hi \xff")  # what Python makes of that argv: "hi \udcff"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def env_for(server: MessagesServer, tmp_path: Path) -> dict[str, str]:
    return cli_env(server, HOME=str(tmp_path / "home"))


def assert_clean(stderr: str) -> None:
    assert "Traceback" not in stderr and "Error" not in stderr, stderr


def test_prompt_argument_that_is_not_utf8_runs_with_a_replacement_character(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    done = run_cli(
        ["task", NOT_UTF8, "-C", str(workspace)],
        env_for(api_server, tmp_path),
        cwd=tmp_path,
        input="",
    )
    assert done.returncode == 0, done.stderr
    assert_clean(done.stderr)
    assert api_server.requests[0].first_user_text == "hi \ufffd"


@pytest.mark.parametrize(
    "command",
    ["task -", "task 'read this'", "run -"],
    ids=["task-dash", "task-piped", "run-dash"],
)
def test_stdin_that_is_not_utf8_runs_with_a_replacement_character(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, command: str
) -> None:
    done = shell(
        f"printf 'hi \\377' | isoagent {command} -C {shlex.quote(str(workspace))}",
        env_for(api_server, tmp_path),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert_clean(done.stderr)
    assert "hi \ufffd" in api_server.requests[0].first_user_text
    transcripts = list((workspace / ".isoagent" / "runs").glob("*/*.jsonl"))
    assert transcripts and all(read_jsonl(path) for path in transcripts)


def test_an_unencodable_event_is_reported_once_and_never_raises(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.jsonl"
    writer = TranscriptWriter(path, lambda: FileIO(path, "wb"))
    good = MessageAdded("user", [TextBlock("fine")], 0, child="001")
    writer(good)
    for _ in range(2):
        writer(MessageAdded("user", [TextBlock(NOT_UTF8)], 0, child="001"))
    writer(good)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"isoagent: cannot write transcript {path}")
    assert len(read_jsonl(path)) == 1  # valid JSONL up to the failure


def test_task_with_a_closed_stdin_runs_without_attached_stdin(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    done = shell(
        f"isoagent task hi -C {shlex.quote(str(workspace))} <&-",
        env_for(api_server, tmp_path),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert_clean(done.stderr)
    assert api_server.requests[0].first_user_text == "hi"


@pytest.mark.parametrize("command", ["task -", "run -", "batch -"])
def test_dash_with_a_closed_stdin_is_a_usage_error(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, command: str
) -> None:
    done = shell(
        f"isoagent {command} -C {shlex.quote(str(workspace))} <&-",
        env_for(api_server, tmp_path),
        tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert_clean(done.stderr)
    assert done.stderr.startswith("isoagent: ") and "stdin is closed" in done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert not api_server.requests


def test_unreadable_batch_file_is_one_line(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    env = env_for(api_server, tmp_path)
    for name, why in (("missing.txt", "No such file"), (".", "directory")):
        done = run_cli(["batch", name, "-C", str(workspace)], env, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert_clean(done.stderr)
        assert done.stderr.startswith("isoagent: ") and why in done.stderr, done.stderr


@pytest.mark.parametrize("via", ["path", "link", "stdin"])
def test_batch_output_onto_its_own_input_is_refused_and_the_input_kept(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, via: str
) -> None:
    tasks = tmp_path / "t.txt"
    tasks.write_text("first task\nsecond task")  # no newline at the end
    (tmp_path / "link.txt").symlink_to(tasks)
    output = {"path": "t.txt", "link": "link.txt", "stdin": "t.txt"}[via]
    source = "- < t.txt" if via == "stdin" else "t.txt"
    done = shell(
        f"isoagent batch {source} -o {output} -C {shlex.quote(str(workspace))}",
        env_for(api_server, tmp_path),
        tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert_clean(done.stderr)
    assert done.stderr == f"isoagent: --output {output} is the input file: name another file\n"
    assert tasks.read_text() == "first task\nsecond task"
    assert not api_server.requests


def test_resume_keeps_a_last_output_line_that_is_complete_json(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    (tmp_path / "t.txt").write_text("one\ntwo\n")
    out = tmp_path / "out.jsonl"
    args = ["batch", "t.txt", "-o", "out.jsonl", "-C", str(workspace)]
    env = env_for(api_server, tmp_path)
    assert run_cli(args, env, cwd=tmp_path).returncode == 0
    first, second = out.read_text().splitlines()
    out.write_text(f"{first}\n{second}")  # whole, but its newline is missing
    api_server.requests.clear()
    done = run_cli(args, env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not api_server.requests  # both ids still count as done
    assert out.read_text() == f"{first}\n{second}\n"


def test_stdout_reader_gone_exits_141_quietly(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = lambda req: text_reply("the answer", delay=1.0)
    done = shell(
        f"isoagent task hi -C {shlex.quote(str(workspace))} | true; "
        'echo "status ${PIPESTATUS[0]}"',
        env_for(api_server, tmp_path),
        tmp_path,
    )
    assert done.stdout == "status 141\n", done.stderr
    assert_clean(done.stderr)
    assert "isoagent:" not in done.stderr


@pytest.mark.parametrize(("fails", "code", "stdout"), [(False, 0, "ok\n"), (True, 1, "")])
def test_stderr_reader_gone_leaves_the_run_and_its_exit_code_alone(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, fails: bool, code: int, stdout: str
) -> None:
    if fails:
        api_server.handler = lambda req: error_reply(400, "invalid_request_error", "no")
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to stderr now fails with EPIPE
    try:
        done = subprocess.run(
            [*ISOAGENT, "task", "hi", "-C", str(workspace)],
            env=env_for(api_server, tmp_path),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=write_end,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert done.returncode == code
    assert done.stdout == stdout
    transcripts = list((workspace / ".isoagent" / "runs").glob("*/*.jsonl"))
    assert any(json.loads(line)["type"] == "result" for p in transcripts for line in p.open())


@pytest.mark.parametrize(
    ("closed", "stdout"),
    [("2>&-", "ok\n"), ("--output-format json >&-", ""), ("<&- >&- 2>&-", "")],
)
def test_closed_std_streams_leave_the_run_going(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, closed: str, stdout: str
) -> None:
    done = shell(
        f"isoagent task hi -C {shlex.quote(str(workspace))} {closed}",
        env_for(api_server, tmp_path),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == stdout
    assert len(api_server.requests) == 1
