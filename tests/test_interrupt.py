"""Ctrl-C, SIGTERM and SIGHUP end every child and grandchild, record how each ended, remove
their temporary folders and say where the transcripts are; a second Ctrl-C changes none of
that; a reader of stdout that goes away ends the run quietly with 141."""

from __future__ import annotations

import json
import secrets
import signal
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support.cli import read_jsonl, run_dirs, shell, start_cli, started_children
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.support.processes import alive, running, wait_for


@pytest.mark.parametrize("fork_server", ["1", "0"])
@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
)
def test_signal_to_cli_ends_every_child_records_it_and_removes_its_temp_folder(
    api_server: MessagesServer, tmp_path: Path, sig: signal.Signals, code: int, fork_server: str
) -> None:
    started = tmp_path / "started"
    background = f"300.{secrets.randbelow(10**9)}"  # its background job's: found by it
    command = f"sleep {background} & touch {started}; sleep 300"

    def handler(req: Request) -> Reply:
        if req.is_parent:
            return tool_reply(
                "Agent",
                {"description": "hang", "prompt": "hang", "subagent_type": "general-purpose"},
            )
        if req.turn == 0:
            return tool_reply("Bash", {"command": command})
        return text_reply("unreachable")

    api_server.handler = handler
    temp = tmp_path / "temp"
    temp.mkdir()
    env = cli_env(api_server, TMPDIR=str(temp), ISOAGENT_FORK_SERVER=fork_server)
    cli = start_cli(["run", "go"], env, cwd=tmp_path)
    assert wait_for(started.exists, 30)
    [child_pid] = started_children(tmp_path)
    [grandchild_pid] = running("sleep", background)
    assert alive(child_pid)
    assert list(temp.glob("isoagent-*"))  # the child's temporary folder

    cli.send_signal(sig)
    _, stderr = cli.communicate(timeout=30)
    assert cli.returncode == code, stderr
    assert "interrupted; transcripts so far are in .isoagent/runs/" in stderr
    assert "Traceback" not in stderr
    assert wait_for(lambda: not alive(child_pid) and not alive(grandchild_pid), 5)
    assert not list(temp.glob("isoagent-*"))
    [run] = run_dirs(tmp_path)
    [transcript] = run.glob("child-*.jsonl")
    last = read_jsonl(transcript)[-1]
    assert last["type"] == "child_result"
    assert last["result"]["status"] == "cancelled"
    assert last.get("exit_code") is not None  # its end was seen, not given up on
    final = read_jsonl(run / "run.jsonl")[-1]
    assert final["type"] == "result" and final["result"]["status"] == "cancelled"
    assert final["result"]["error"] == f"interrupted ({sig.name})"


def test_second_ctrl_c_during_clean_up_neither_cuts_it_short_nor_prints_a_traceback(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    stubborn = f"{sys.executable} -m tests.support.faulty_children stubborn {tmp_path}"
    env = cli_env(api_server, ISOAGENT_CHILD_COMMAND=stubborn)
    cli = start_cli(["task", "go"], env, cwd=tmp_path)
    ready = tmp_path / "ready.pid"  # written once SIGTERM is caught, not before
    assert wait_for(ready.exists, 30)
    child = int(ready.read_text())
    cli.send_signal(signal.SIGINT)
    assert wait_for((tmp_path / "term.pid").exists, 30)  # being ended: it ignores SIGTERM
    cli.send_signal(signal.SIGINT)
    _, stderr = cli.communicate(timeout=30)
    assert cli.returncode == 130, stderr
    assert "Traceback" not in stderr and "Exception" not in stderr
    assert wait_for(lambda: not alive(child), 10)  # the clean-up went on to SIGKILL
    [run] = run_dirs(tmp_path)
    assert read_jsonl(next(run.glob("child-*.jsonl")))[-1]["type"] == "child_result"


@pytest.mark.parametrize("command", ["run", "task"])
@pytest.mark.parametrize("reader", ["head -1", "true"])  # true: gone before the first line
def test_reader_of_stream_json_gone_ends_the_run_with_141_without_waiting_for_the_model(
    api_server: MessagesServer, tmp_path: Path, command: str, reader: str
) -> None:
    answer = threading.Event()  # the model answers only once the test is over

    def handler(req: Request) -> Reply:
        answer.wait(120)
        return text_reply("too late")

    api_server.handler = handler
    try:
        done = shell(
            f"isoagent {command} go --output-format stream-json | {reader}; "
            'echo "status ${PIPESTATUS[0]}"',
            cli_env(api_server),
            tmp_path,
            timeout=60,
        )
    finally:
        answer.set()
    *lines, status = done.stdout.splitlines()
    assert status == "status 141", done.stderr
    assert [json.loads(line)["subtype"] for line in lines] == (["init"] if lines else [])
    assert "Traceback" not in done.stderr and "isoagent:" not in done.stderr


def test_batch_results_reader_gone_ends_the_batch_with_141_without_waiting_for_the_model(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    answer = threading.Event()

    def handler(req: Request) -> Reply:
        answer.wait(120)
        return text_reply("too late")

    api_server.handler = handler
    (tmp_path / "tasks.txt").write_text("one\ntwo\n")
    try:
        done = shell(
            'isoagent batch tasks.txt | true; echo "status ${PIPESTATUS[0]}"',
            cli_env(api_server),
            tmp_path,
            timeout=60,
        )
    finally:
        answer.set()
    assert done.stdout == "status 141\n", done.stderr
    assert "Traceback" not in done.stderr
