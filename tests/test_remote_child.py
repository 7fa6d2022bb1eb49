"""A child started the way a launcher starts it on another host: with a login's
environment, in a folder of its own, and a Task that names no temp folder of the
parent's. It settles on its host from its Task alone, and ends itself and what it
started when the parent goes silent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from isoagent.protocol import (
    AgentSpec,
    ChildFrame,
    FrameReader,
    FrameWriter,
    Heartbeat,
    Hello,
    Identity,
    ModelCall,
    ModelReply,
    Result,
    Task,
    ToolUseBlock,
    decode_frame,
)
from isoagent.protocol.hostserver import STDOUT, Data, FromServer, Open, Opened, Ready
from tests.support.processes import alive, wait_for

AGENT = AgentSpec("general-purpose", "d", "p", ["Bash"])
COMMAND = "sleep 300 & echo $! > ../sleeper.pid; env > ../env.txt; pwd > ../pwd.txt"


def start_remote_child(host: Path) -> subprocess.Popen[bytes]:
    """``python -m isoagent.child`` as ssh would start it: a login environment (with a
    secret no child may keep), the host's own TMPDIR, the login folder as cwd."""
    (host / "tmp").mkdir(parents=True)
    (host / "home" / "ws").mkdir(parents=True)
    login = {
        "PATH": os.environ["PATH"],
        "HOME": str(host / "home"),
        "TMPDIR": str(host / "tmp"),
        "SSH_CONNECTION": "10.0.0.1 50000 10.0.0.2 22",
        "LOGIN_SECRET": "s3cret",
    }
    return subprocess.Popen(
        [sys.executable, "-E", "-s", "-P", "-m", "isoagent.child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=host / "home",
        env=login,
        start_new_session=True,
    )


def next_frame(reader: FrameReader, seen: set[type] | None = None) -> ChildFrame:
    """The next ModelCall or Result; the types of the frames passed over go to ``seen``."""
    while not isinstance(frame := reader.read(), ModelCall | Result):
        assert frame is not None, "the child ended early"
        if seen is not None:
            seen.add(type(frame))
    return frame


def test_a_remote_child_settles_on_its_host_and_ends_itself_when_the_parent_goes_silent(
    tmp_path: Path,
) -> None:
    host = tmp_path / "host"
    child = start_remote_child(host)
    assert child.stdin is not None and child.stdout is not None
    writer = FrameWriter(child.stdin.fileno())
    reader = FrameReader(child.stdout.fileno(), ChildFrame)
    try:
        assert isinstance(reader.read(), Hello)
        identity = Identity(tag="run-x-001", depth=1, run_id="run-x", child="001")
        writer.write(Task("go", AGENT, "m", "ws", "", identity=identity, heartbeat=1.0))
        seen: set[type] = set()
        call = next_frame(reader, seen)
        assert isinstance(call, ModelCall)
        writer.write(ModelReply(call.turn, [ToolUseBlock("t1", "Bash", {"command": COMMAND})]))
        assert isinstance(next_frame(reader, seen), ModelCall)  # the command ran
        while Heartbeat not in seen:  # the child says it is alive; the parent, from now on, not
            seen.add(type(reader.read()))
        assert wait_for(lambda: child.poll() is not None, 60), "the child never ended"
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 3  # EXIT_PARENT_GONE
    assert b"parent silent for 1 s" in child.stderr.read()  # type: ignore[union-attr]

    env = dict(line.split("=", 1) for line in (host / "home" / "env.txt").read_text().splitlines())
    assert "LOGIN_SECRET" not in env and "SSH_CONNECTION" not in env  # a local child's allow-list
    assert env["ISOAGENT_CHILD_TAG"] == "run-x-001" and env["ISOAGENT_DEPTH"] == "1"
    assert Path(env["TMPDIR"]).parent == host / "tmp"  # made by the child, on its host
    assert (host / "home" / "pwd.txt").read_text().strip() == str(host / "home" / "ws")
    sleeper = int((host / "home" / "sleeper.pid").read_text())
    assert wait_for(lambda: not alive(sleeper), 30), "its command outlived it"
    assert wait_for(lambda: not any((host / "tmp").iterdir()), 30), "its temp folder is left"


def test_a_remote_child_whose_workspace_is_missing_fails_at_once(tmp_path: Path) -> None:
    child = start_remote_child(tmp_path / "host")
    assert child.stdin is not None and child.stdout is not None
    writer = FrameWriter(child.stdin.fileno())
    reader = FrameReader(child.stdout.fileno(), ChildFrame)
    try:
        assert isinstance(reader.read(), Hello)
        writer.write(Task("go", AGENT, "m", "/nowhere/ws", "", heartbeat=5.0))
        result = next_frame(reader)
    finally:
        child.stdin.close()
        child.wait(30)
    assert isinstance(result, Result) and result.status == "error"
    assert "the workspace /nowhere/ws does not exist on" in result.error


def start_host_server(host: Path, heartbeat: str) -> subprocess.Popen[bytes]:
    (host / "tmp").mkdir(parents=True)
    return subprocess.Popen(
        [sys.executable, "-E", "-s", "-P", "-m", "isoagent.child.hostserver", heartbeat],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=host,
        env={"PATH": os.environ["PATH"], "HOME": str(host), "TMPDIR": str(host / "tmp")},
        start_new_session=True,
    )


def test_a_host_server_forks_children_on_channels_and_ends_with_its_link(tmp_path: Path) -> None:
    server = start_host_server(tmp_path / "host", "0")
    assert server.stdin is not None and server.stdout is not None
    writer = FrameWriter(server.stdin.fileno())
    reader = FrameReader(server.stdout.fileno(), FromServer)
    try:
        assert isinstance(reader.read(), Ready)
        for channel in (1, 2):
            writer.write(Open(channel))
        said: dict[int, bytes] = {1: b"", 2: b""}
        pids = {}
        while any(len(data) < 4 for data in said.values()):  # each child's Hello header
            frame = reader.read()
            if isinstance(frame, Opened):
                pids[frame.channel] = frame.pid
            elif isinstance(frame, Data) and frame.stream == STDOUT:
                said[frame.channel] += frame.data
        assert len(set(pids.values())) == 2
        hello = decode_frame(said[1][4:], ChildFrame)
        assert isinstance(hello, Hello) and hello.pid == pids[1]
    finally:
        server.stdin.close()  # the link's end: the server ends, and its children with it
        server.wait(30)
    assert wait_for(lambda: not any(alive(pid) for pid in pids.values()), 30)


def test_a_host_server_whose_parent_goes_silent_ends(tmp_path: Path) -> None:
    server = start_host_server(tmp_path / "host", "1")
    assert server.stdout is not None
    try:
        assert isinstance(FrameReader(server.stdout.fileno(), FromServer).read(), Ready)
        assert wait_for(lambda: server.poll() is not None, 60), "it kept waiting"
    finally:
        server.kill()
        server.wait()
    assert b"parent silent for 1 s" in server.stderr.read()  # type: ignore[union-attr]
