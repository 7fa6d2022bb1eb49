"""Children through a real OpenSSH server on 127.0.0.1 (its own config, keys and port),
started by the test; skipped, with the reason, where sshd is not installed."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support import sshd
from tests.support.cli import read_jsonl, run_dirs
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.support.remote_runs import run_batch, run_task

pytestmark = pytest.mark.skipif(bool(sshd.unavailable()), reason=sshd.unavailable() or "-")

PROBE = (
    'echo "tmp=$TMPDIR depth=$ISOAGENT_DEPTH ssh=${SSH_CONNECTION:-none} child=$PPID"; '
    "cat where.txt"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sshd.Sshd]:
    running = sshd.Sshd(tmp_path_factory.mktemp("sshd"))
    running.start()
    yield running
    running.stop()


def through(server: sshd.Sshd, hosts: str) -> list[str]:
    return ["--hosts", hosts, "--launcher", server.launcher(), "--remote-python", sys.executable]


def probe(req: Request) -> Reply:
    if req.turn == 0:
        return tool_reply("Bash", {"command": PROBE})
    return text_reply(req.tool_results[0]["content"])


def ssh_processes(server: sshd.Sshd) -> list[int]:
    """Local ssh clients (children's or control masters) that use this server's config."""
    needle = str(server.client_config).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("host_server", ["1", "0"], ids=["host-server", "launch-per-child"])
def test_children_run_through_ssh_over_one_login_with_a_child_environment(
    api_server: MessagesServer, server: sshd.Sshd, tmp_path: Path, host_server: str
) -> None:
    """One login either way: the host server's link, or the control master that every
    child's own ssh rides (``ISOAGENT_HOST_SERVER=0``)."""
    workspace, remote_workspace = tmp_path / "ws", tmp_path / "remote-ws"
    workspace.mkdir()
    remote_workspace.mkdir()
    (remote_workspace / "where.txt").write_text("the remote workspace\n")
    api_server.handler = probe
    logins = server.accepted_logins()
    args = ["-C", str(workspace), "--remote-workdir", str(remote_workspace)]
    env = cli_env(api_server, ISOAGENT_HOST_SERVER=host_server)
    done, records = run_batch(3, [*args, *through(server, "127.0.0.1:2")], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(records) == 3 and all(r["status"] == "ok" for r in records), records
    for record in records:
        assert "ssh=none" in record["summary"]  # the login's SSH_CONNECTION did not stay
        assert "the remote workspace" in record["summary"]
        tmp = record["summary"].split("tmp=", 1)[1].split()[0]
        assert tmp and not os.path.exists(tmp)  # made on the host, removed when it ended
    assert server.accepted_logins() - logins == 1
    started = {e["pid"] for e in read_jsonl(run_dirs(workspace)[0] / "run.jsonl") if "pid" in e}
    children = {int(r["summary"].split("child=", 1)[1].split()[0]) for r in records}
    # on the host each child is pid 1 of a pid namespace of its own, whichever way it came;
    # the parent knows three processes (the host server's forks, or the ssh clients)
    assert children == {1} and len(started) == 3
    assert ssh_processes(server) == []  # no ssh left, the master included


def test_an_unknown_host_is_a_launch_failure_and_the_task_moves_to_the_next(
    api_server: MessagesServer, server: sshd.Sshd, tmp_path: Path
) -> None:
    (tmp_path / "where.txt").write_text("here\n")
    api_server.handler = probe
    hosts = "nosuchhost.invalid:1,127.0.0.1:1"
    done = run_task(["-C", str(tmp_path), *through(server, hosts)], cli_env(api_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("here")
    assert "did not start on host nosuchhost.invalid" in done.stderr
    assert "Could not resolve hostname" in done.stderr
    assert "retry 1 of 2" in done.stderr
