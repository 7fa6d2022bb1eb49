"""Fault injection: whatever breaks, the run ends in time, no process survives, nothing is lost.

Every case checks the same four things: the CLI ends within its timeout, no
process it started is left (each one carries a marker variable in its
environment, and the pids the test knows of are checked by name), every
transcript written so far is complete JSONL, and the exit code and the message
are the documented ones.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from isoagent.child.agent.process_tree import PPID, stat_fields
from isoagent.protocol import PROTOCOL_VERSION
from tests.conftest import cli_env
from tests.support.cli import ISOAGENT, read_jsonl, run_cli, run_dirs, start_cli
from tests.support.faulty_children import WRONG_VERSION
from tests.support.messages_server import (
    MessagesServer,
    Reply,
    Request,
    error_reply,
    text_reply,
    tool_reply,
)
from tests.support.processes import alive, wait_for
from tests.support.scripts import delegating

# LC_* variables reach children and everything they start (the child environment's allow-list)
MARK = "LC_ISOAGENT_FAULT_TEST"
OUTPUT_CAP = 30_000  # protocol.Limits.output_cap


# --- checks every fault test makes --------------------------------------------


def marked_processes(mark: str) -> list[int]:
    """Live processes whose environment carries this test's marker."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if needle in environ.split(b"\0"):
                found.append(int(entry.name))
    return found


def read_pid(path: Path, timeout: float = 60.0) -> int:
    assert wait_for(path.exists, timeout), f"{path.name} never appeared"
    return int(path.read_text())


def assert_nothing_survives(mark: str, pids: list[int], within: float = 5.0) -> None:
    def survivors() -> list[int]:
        return [p for p in pids if alive(p)] + marked_processes(mark)

    wait_for(lambda: not survivors(), within)
    left = survivors()
    details = [Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ") for p in left]
    assert not left, f"still running: {left} {details}"


def assert_transcripts_complete(workdir: Path) -> None:
    """Every JSONL file of every run ends with a whole line and every line parses."""
    paths = sorted(workdir.glob(".isoagent/runs/*/*.jsonl"))
    assert paths, "no transcript written"
    for path in paths:
        text = path.read_text()
        assert text == "" or text.endswith("\n"), f"{path.name} ends inside a line"
        for line in text.splitlines():
            json.loads(line)


def assert_one_line_messages(stderr: str) -> None:
    """stderr holds progress lines and one-line ``isoagent: ...`` messages, nothing else."""
    assert "Traceback" not in stderr, stderr
    for line in stderr.splitlines():
        assert line.startswith(("  [", "isoagent: ")), f"not a one-line message: {line!r}"


@pytest.fixture
def mark() -> str:
    return secrets.token_hex(8)


def fault_env(server: MessagesServer, mark: str, **extra: str) -> dict[str, str]:
    return cli_env(server, **{MARK: mark}, **extra)


def faulty_child(behaviour: str, folder: Path) -> str:
    """An ISOAGENT_CHILD_COMMAND that starts a misbehaving child (tests/support/faulty_children)."""
    return f"{sys.executable} -m tests.support.faulty_children {behaviour} {folder}"


def turns(*replies: Reply) -> Callable[[Request], Reply]:
    """A handler for a lone child (``isoagent task``): the n-th turn gets ``replies[n]``."""
    return lambda req: replies[min(req.turn, len(replies) - 1)]


def child_pids(workdir: Path) -> list[int]:
    return [
        event["pid"]
        for run in run_dirs(workdir)
        for event in read_jsonl(run / "run.jsonl")
        if event["type"] == "child_started"
    ]


# --- the child breaks the protocol ---------------------------------------------


def test_truncated_frame_is_a_clear_tool_result(
    api_server: MessagesServer, tmp_path: Path, mark: str
) -> None:
    api_server.handler = delegating([text_reply("never asked")])
    env = fault_env(api_server, mark, ISOAGENT_CHILD_COMMAND=faulty_child("truncated", tmp_path))
    done = run_cli(["run", "go"], env, cwd=tmp_path, timeout=60)

    assert done.returncode == 0, done.stderr
    assert "error=True" in done.stdout
    assert "crashed: child sent a corrupt frame: stream ended inside a frame" in done.stdout
    assert "risky - crashed" in done.stderr
    assert_one_line_messages(done.stderr)
    assert_nothing_survives(mark, [read_pid(tmp_path / "child.pid")])
    assert_transcripts_complete(tmp_path)


def test_wrong_protocol_version_is_an_error_naming_both_versions(
    api_server: MessagesServer, tmp_path: Path, mark: str
) -> None:
    env = fault_env(
        api_server, mark, ISOAGENT_CHILD_COMMAND=faulty_child("wrong-version", tmp_path)
    )
    done = run_cli(["task", "go"], env, cwd=tmp_path, timeout=60)

    assert done.returncode == 1, done.stderr
    assert (
        f"isoagent: error: child speaks protocol version {WRONG_VERSION}, "
        f"this parent speaks {PROTOCOL_VERSION}: reinstall isoagent"
    ) in done.stderr
    assert api_server.requests == []  # no Task was sent, so no model call was made
    assert_one_line_messages(done.stderr)
    assert_nothing_survives(mark, [read_pid(tmp_path / "child.pid")])
    assert_transcripts_complete(tmp_path)


def test_timeout_ends_a_hung_child_with_every_process_it_started(
    api_server: MessagesServer, tmp_path: Path, mark: str
) -> None:
    timeout = 2.0
    env = fault_env(api_server, mark, ISOAGENT_CHILD_COMMAND=faulty_child("hang", tmp_path))
    cli = subprocess.Popen(
        [*ISOAGENT, "task", "go", "--timeout", f"{timeout:g}"],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        child = read_pid(tmp_path / "child.pid")
        pids = [child, read_pid(tmp_path / "grouped.pid"), read_pid(tmp_path / "escaped.pid")]
        _, stderr = cli.communicate(timeout=60)  # the hung child would hold it for ever
    finally:
        cli.kill()

    assert cli.returncode == 4, stderr
    assert "isoagent: timeout: child timed out after 2 s" in stderr
    assert_one_line_messages(stderr)
    assert_nothing_survives(mark, pids, within=1.0)
    assert_transcripts_complete(tmp_path)


def test_grandchild_hiding_with_the_pipes_neither_hangs_nor_crashes_the_parent(
    api_server: MessagesServer, tmp_path: Path, mark: str
) -> None:
    """The one process the parent cannot find (no session, no tag): the run still ends
    cleanly. Documented limit: it survives, so the test ends it."""
    env = fault_env(api_server, mark, ISOAGENT_CHILD_COMMAND=faulty_child("hide", tmp_path))
    try:
        done = run_cli(["task", "go"], env, cwd=tmp_path, timeout=60)
    finally:
        hidden = read_pid(tmp_path / "hidden.pid")
        os.kill(hidden, signal.SIGKILL)

    assert done.returncode == 4, done.stderr
    assert "isoagent: crashed: child exited before sending its Result (exit code 0)" in done.stderr
    assert_one_line_messages(done.stderr)
    assert_nothing_survives(mark, [read_pid(tmp_path / "child.pid")])
    assert_transcripts_complete(tmp_path)


# --- the child's commands misbehave ------------------------------------------------


@pytest.mark.parametrize(
    "background",
    [
        "sleep 300 &",
        "sleep 300 > /dev/null 2>&1 &",
        "setsid sleep 300 &",
        "(setsid sleep 300 > /dev/null 2>&1 & echo $! > {pid})",
    ],
    ids=["holds-pipe", "redirected", "setsid-holds-pipe", "daemonized"],
)
def test_background_process_of_a_command_neither_hangs_the_run_nor_survives(
    api_server: MessagesServer, tmp_path: Path, mark: str, background: str
) -> None:
    pid_file = tmp_path / "bg.pid"
    command = background.format(pid=pid_file)
    if "{pid}" not in background:
        command += f" echo $! > {pid_file}"
    command += "; echo started"
    api_server.handler = turns(tool_reply("Bash", {"command": command}), text_reply("done"))
    done = run_cli(["task", "go"], fault_env(api_server, mark), cwd=tmp_path, timeout=60)

    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"
    child_turn = next(r for r in api_server.requests if r.turn == 1)
    assert "started" in child_turn.tool_results[0]["content"]
    assert_one_line_messages(done.stderr)
    read_pid(pid_file)  # it started: a pid of the child's namespace, found here by its mark
    assert_nothing_survives(mark, child_pids(tmp_path))
    assert_transcripts_complete(tmp_path)


def test_parent_killed_with_sigkill_leaves_no_child_or_grandchild(
    api_server: MessagesServer, tmp_path: Path, mark: str
) -> None:
    started = tmp_path / "started"  # the pids its commands see are their namespace's
    command = (
        "sleep 300 > /dev/null & setsid sleep 300 & "
        f"echo $$ > {started}.part; mv {started}.part {started}; sleep 300"
    )
    api_server.handler = delegating([tool_reply("Bash", {"command": command})])
    # the command in its own process, with a fork server of its own (through the warm
    # daemon, a killed client hangs its session up: test_warm_daemon.py)
    env = {**fault_env(api_server, mark), "ISOAGENT_DAEMON": "0"}
    cli = start_cli(["run", "go"], env, cwd=tmp_path)
    try:
        read_pid(started)
        [child] = child_pids(tmp_path)
        server = int(stat_fields(child)[PPID])  # the fork server that forked the child
        assert b"child.forkserver" in Path(f"/proc/{server}/cmdline").read_bytes()
        pids = [child, server]
        assert all(alive(p) for p in pids) and len(marked_processes(mark)) >= 4
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait(timeout=10)
        # children see EOF on stdin and end their commands: about a second, under load;
        # the fork server sees EOF on its socket and exits
        assert_nothing_survives(mark, pids, within=3.0)
    finally:
        cli.kill()
        cli.communicate()
    assert_transcripts_complete(tmp_path)


# --- the API misbehaves -----------------------------------------------------------


def test_overloaded_api_is_retried_and_the_run_succeeds(
    api_server: MessagesServer, tmp_path: Path, mark: str
) -> None:
    overloaded = error_reply(529, "overloaded_error", "Overloaded")
    task = tool_reply(
        "Agent", {"description": "job", "prompt": "do it", "subagent_type": "general-purpose"}
    )

    def handler(req: Request) -> list[Reply]:
        if req.is_parent:
            return [overloaded, task] if req.turn == 0 else [overloaded, text_reply("all done")]
        return [overloaded, text_reply("child done")]

    api_server.handler = handler
    done = run_cli(["run", "go"], fault_env(api_server, mark), cwd=tmp_path, timeout=60)

    assert done.returncode == 0, done.stderr
    assert done.stdout == "all done\n"
    assert len(api_server.requests) == 6  # three calls, each answered 529 once
    assert "job - done" in done.stderr
    assert_one_line_messages(done.stderr)
    assert_nothing_survives(mark, child_pids(tmp_path))
    assert_transcripts_complete(tmp_path)


def test_bad_request_ends_the_child_with_error_and_the_parent_goes_on(
    api_server: MessagesServer, tmp_path: Path, mark: str
) -> None:
    api_server.handler = delegating(
        [error_reply(400, "invalid_request_error", "messages.0: too long")]
    )
    done = run_cli(["run", "go"], fault_env(api_server, mark), cwd=tmp_path, timeout=60)

    assert done.returncode == 0, done.stderr
    message = "model call failed: 400: invalid_request_error: messages.0: too long"
    assert "error=True" in done.stdout and f"error: {message}" in done.stdout
    assert "risky - error (0 tools, " in done.stderr and message in done.stderr
    assert len([r for r in api_server.requests if not r.is_parent]) == 1  # never retried
    assert_one_line_messages(done.stderr)
    assert_nothing_survives(mark, child_pids(tmp_path))
    (run,) = run_dirs(tmp_path)
    (transcript,) = run.glob("child-001-*.jsonl")
    assert read_jsonl(transcript)[-1]["result"]["status"] == "error"
    assert_transcripts_complete(tmp_path)


def test_server_error_that_persists_is_a_clear_message_after_retries(
    api_server: MessagesServer, tmp_path: Path, mark: str
) -> None:
    wait = {"retry-after-ms": "1000"}  # long enough to be said
    error = error_reply(500, "api_error", "Internal server error", headers=wait)
    api_server.handler = lambda req: error
    args = ["run", "--api-retry-deadline", "2.5", "go"]
    done = run_cli(args, fault_env(api_server, mark), cwd=tmp_path, timeout=60)

    assert done.returncode == 1
    assert done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("isoagent: error: model call failed: API server error for ")
    assert "last: 500: api_error: Internal server error); gave up at the retry deadline" in last
    assert done.stderr.count("isoagent: API server error (500): retrying, attempt 2 (for up") == 1
    assert len(api_server.requests) >= 3  # retried, with backoff, until the deadline
    assert_one_line_messages(done.stderr)
    assert_nothing_survives(mark, [])
    assert_transcripts_complete(tmp_path)


# --- the disk fills up -----------------------------------------------------------------


FILL_BLOCKS = "head -c 4M /dev/zero > fill"
FILL_INODES = "for n in $(seq 100); do : > f$n || break; done 2>&1 | tail -1"


@pytest.fixture(
    params=[("size=1m", FILL_BLOCKS), ("size=1m,nr_inodes=32", f"{FILL_BLOCKS}; {FILL_INODES}")],
    ids=["no-blocks-left", "no-blocks-or-inodes-left"],
)
def full_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A small tmpfs mounted under tmp_path (needs root, or skips), and a command that
    fills it: a later transcript write fails, or (no inodes) a transcript cannot be created."""
    options, fill = request.param
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield disk, fill
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True, check=False)


def test_disk_full_while_writing_transcripts_is_reported_and_the_run_finishes(
    api_server: MessagesServer, full_disk: tuple[Path, str], tmp_path: Path, mark: str
) -> None:
    disk, fill = full_disk

    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn == 0:
                # fill the disk, then print more than the run log's last page can take
                more = "head -c 20000 /dev/zero | tr '\\0' x"
                return tool_reply("Bash", {"command": f"{fill}; {more}"})
            if req.turn == 1:
                return tool_reply(
                    "Agent",
                    {"description": "job", "prompt": "do it", "subagent_type": "general-purpose"},
                )
            return text_reply("finished: " + req.tool_results[0]["content"].splitlines()[0])
        return text_reply("child done")

    api_server.handler = handler
    # the child first writes more to its stderr than a pipe holds, for a log on the full disk
    env = fault_env(api_server, mark, ISOAGENT_CHILD_COMMAND=faulty_child("noisy", tmp_path))
    done = run_cli(["run", "go"], env, cwd=disk, timeout=90)

    assert done.returncode == 0, done.stderr
    assert done.stdout == "finished: child done\n"
    assert "No space left on device" in api_server.requests[1].tool_results[0]["content"]
    (run,) = run_dirs(disk)
    failures = [line for line in done.stderr.splitlines() if "No space left on device" in line]
    expected = [
        f"isoagent: cannot write transcript {run / 'run.jsonl'}: ",
        f"isoagent: cannot write transcript {run / 'child-001-general-purpose.jsonl'}: ",
        f"isoagent: cannot write child log {run / 'child-001-general-purpose.stderr.log'}: ",
    ]
    for start in expected:  # each reported once
        assert len([line for line in failures if line.startswith(start)]) == 1, done.stderr
    assert "job - done" in done.stderr
    assert_one_line_messages(done.stderr)
    assert_nothing_survives(mark, [read_pid(tmp_path / "child.pid")])
    assert_transcripts_complete(disk)


# --- big inputs ------------------------------------------------------------------------


def test_prompt_of_several_megabytes_from_stdin_reaches_the_child_whole(
    api_server: MessagesServer, tmp_path: Path, mark: str
) -> None:
    prompt = "".join(f"line {n}: héllo wörld ✓\n" for n in range(200_000))
    assert len(prompt.encode()) > 5_000_000

    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn == 0:
                return tool_reply(
                    "Agent",
                    {"description": "big", "prompt": req.first_user_text,
                     "subagent_type": "Explore"},
                )  # fmt: skip
            return text_reply(req.tool_results[0]["content"].splitlines()[0])
        return text_reply(f"child got {len(req.first_user_text)} characters")

    api_server.handler = handler
    done = run_cli(["run", "-"], fault_env(api_server, mark), cwd=tmp_path, input=prompt)

    assert done.returncode == 0, done.stderr
    assert done.stdout == f"child got {len(prompt)} characters\n"
    child = next(r for r in api_server.requests if not r.is_parent)
    assert child.first_user_text == prompt
    assert_one_line_messages(done.stderr)
    assert_nothing_survives(mark, child_pids(tmp_path))
    assert_transcripts_complete(tmp_path)


@pytest.mark.parametrize(
    ("size", "char", "whole"),
    [(OUTPUT_CAP, "x", True), (OUTPUT_CAP, "é", True), (OUTPUT_CAP + 1, "x", False)],
    ids=["at-cap", "at-cap-multibyte", "one-over-cap"],
)
def test_tool_result_at_the_output_cap_arrives_whole_and_one_more_is_cut(
    api_server: MessagesServer, tmp_path: Path, mark: str, size: int, char: str, whole: bool
) -> None:
    command = f"python3 -c \"import sys; sys.stdout.write('{char}' * {size})\""
    api_server.handler = turns(tool_reply("Bash", {"command": command}), text_reply("ok"))
    done = run_cli(["task", "go"], fault_env(api_server, mark), cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    content = next(r for r in api_server.requests if r.turn == 1).tool_results[0]["content"]
    if whole:
        assert content == char * size
    else:
        assert len(content) <= OUTPUT_CAP and "truncated by isoagent" in content
    assert_nothing_survives(mark, child_pids(tmp_path))
    assert_transcripts_complete(tmp_path)
