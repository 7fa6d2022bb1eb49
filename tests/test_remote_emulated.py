"""Children on "other hosts" through a launcher emulator (tests/support/launcher_emulator.py):
each host is a folder the parent never hands over, with a login-like environment and a
link that can be refused, cut or silenced. Placement, slots, no shared filesystem, the
child's identity, heartbeats, retries and host-down, through the real CLI.
"""

from __future__ import annotations

import re
import secrets
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from isoagent.parent.children.sandbox_policy import pid_namespaces_available
from tests.conftest import cli_env
from tests.support.cli import read_jsonl, run_cli, run_dirs
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.support.processes import alive, running, wait_for
from tests.support.remote_runs import run_batch, run_task
from tests.support.scripts import delegating
from tests.test_security_proc import ATTACK, FORGED

EMULATOR = Path(__file__).parent / "support" / "launcher_emulator.py"
PROBE = (
    'echo "pwd=$PWD tmp=$TMPDIR tag=$ISOAGENT_CHILD_TAG depth=$ISOAGENT_DEPTH '
    'secret=${LOGIN_SECRET:-none} ssh=${SSH_CONNECTION:-none}"; cat marker.txt'
)


def remote(root: Path, hosts: str, *more: str) -> list[str]:
    launcher = f"{shlex.quote(sys.executable)} {shlex.quote(str(EMULATOR))} {root} {{host}} --"
    return [
        "--hosts", hosts, "--launcher", launcher, "--remote-python", sys.executable,
        "--remote-workdir", "ws", *more,
    ]  # fmt: skip


def host(root: Path, name: str, *, marker: bool = True) -> Path:
    """Host ``name``'s home, with a workspace ``ws`` holding a file that names the host."""
    home = root / name / "home"
    (home / "ws").mkdir(parents=True, exist_ok=True)
    if marker:
        (home / "ws" / "marker.txt").write_text(f"on host {name}\n")
    return home


def probe_then_answer(delay: float = 0.0) -> Callable[[Request], Reply]:
    """Each child runs PROBE and answers with what it printed."""

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("Bash", {"command": PROBE})
        return text_reply(req.tool_results[0]["content"], delay=delay)

    return handler


def most_at_once(run: Path) -> dict[str, int]:
    """The most children each host ran at once, from the run's record of starts and ends."""
    host_of: dict[str, str] = {}
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    for event in read_jsonl(run / "run.jsonl"):
        if event["type"] == "child_started":
            host = host_of[event["child"]] = event["host"]
            running[host] = running.get(host, 0) + 1
            most[host] = max(most.get(host, 0), running[host])
        elif event["type"] == "child_result":
            running[host_of[event["child"]]] -= 1
    return most


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Where the emulated hosts keep their files: ``root/<host>/``."""
    return Path(tmp_path / "hosts")


def test_children_are_placed_on_free_slots_and_run_in_the_hosts_own_folders(
    api_server: MessagesServer, tmp_path: Path, root: Path, workspace: Path
) -> None:
    homes = {name: host(root, name) for name in ("a", "b")}
    api_server.handler = probe_then_answer(delay=0.3)
    args = ["-C", str(workspace), *remote(root, "a:1,b:2")]
    done, records = run_batch(6, args, cli_env(api_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(records) == 6 and all(r["status"] == "ok" for r in records), records
    most = most_at_once(run_dirs(workspace)[0])
    assert most["a"] == 1 and most["b"] == 2  # their slots, filled
    for record in records:
        on = record["summary"].rsplit("on host ", 1)[1].strip()
        fields = dict(word.split("=", 1) for word in record["summary"].split("\n")[0].split())
        assert fields["pwd"] == str(homes[on] / "ws")  # the remote workdir, on its host
        assert fields["tmp"].startswith(str(root / on / "tmp") + "/")  # made there by the child
        assert fields["depth"] == "1" and fields["tag"]
        assert fields["secret"] == "none" and fields["ssh"] == "none"  # the local allow-list
    for name in ("a", "b"):  # each child's own, removed as it ended (by its janitor)
        assert wait_for(lambda n=name: not any((root / n / "tmp").iterdir()), 30)
    run = run_dirs(workspace)[0]
    assert len(list(run.glob("child-*.jsonl"))) == 6  # the transcripts are here, locally
    assert list(run.glob("child-*.stderr.log")) == []  # no child wrote to its stderr


def test_a_workspace_missing_on_the_host_is_an_error_not_an_ok(
    api_server: MessagesServer, tmp_path: Path, root: Path, workspace: Path
) -> None:
    (root / "a" / "home").mkdir(parents=True)  # no ws there
    api_server.handler = probe_then_answer()
    done = run_task(["-C", str(workspace), *remote(root, "a:1")], cli_env(api_server), tmp_path)
    assert done.returncode != 0
    assert "does not exist on" in done.stderr and "ws" in done.stderr
    assert api_server.requests == []


def test_a_refused_launch_is_retried_elsewhere_and_the_host_marked_down_once(
    api_server: MessagesServer, tmp_path: Path, root: Path, workspace: Path
) -> None:
    host(root, "bad").parent.joinpath("refuse").touch()
    host(root, "good")
    api_server.handler = probe_then_answer(delay=0.2)
    args = ["-C", str(workspace), *remote(root, "bad:1,good:1")]
    done, records = run_batch(6, args, cli_env(api_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert all(r["status"] == "ok" and "on host good" in r["summary"] for r in records)
    assert done.stderr.count("host bad marked down") == 1
    assert (root / "bad" / "refused").read_text().count("refused") == 3  # none after down


def test_launch_failures_everywhere_end_as_launch_failed_after_the_retries(
    api_server: MessagesServer, tmp_path: Path, root: Path, workspace: Path
) -> None:
    for name in ("x", "y"):
        host(root, name).parent.joinpath("refuse").touch()
    args = ["-C", str(workspace), *remote(root, "x:1,y:1", "--retries", "2")]
    done = run_task(args, cli_env(api_server), tmp_path)
    assert done.returncode != 0
    assert "launch_failed" in done.stderr and "Connection refused" in done.stderr
    refused = sum((root / n / "refused").read_text().count("refused") for n in ("x", "y"))
    assert refused == 3  # the first try and two retries
    assert "Traceback" not in done.stderr


def test_a_silent_link_is_detected_by_heartbeat_the_remote_child_ends_itself_and_the_task_moves(
    api_server: MessagesServer, tmp_path: Path, root: Path, workspace: Path
) -> None:
    for name in ("a", "b"):
        host(root, name)
    sleeper = f"300.{secrets.randbelow(10**9)}"  # found by it: its pid is its namespace's

    def handler(req: Request) -> Reply:
        if req.turn == 0:  # a command that would outlive its child if nothing ended it
            command = f"sleep {sleeper} & touch sleeper.started; cat marker.txt"
            return tool_reply("Bash", {"command": command})
        (root / "a" / "silence").touch()  # a's link goes quiet: this reply never gets there
        return text_reply(req.tool_results[0]["content"])

    api_server.handler = handler
    args = ["-C", str(workspace), *remote(root, "a:1,b:1", "--heartbeat", "1")]
    done = run_task(args, cli_env(api_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "on host b"
    assert "lost its link to host a" in done.stderr
    child_a = int((root / "a" / "launches").read_text().split()[1])
    assert (root / "a" / "home" / "ws" / "sleeper.started").exists()
    assert wait_for(lambda: not alive(child_a) and not running("sleep", sleeper), 30)
    run = run_dirs(workspace)[0]
    transcripts = sorted(p.name for p in run.glob("child-*.jsonl"))
    assert len(transcripts) == 2, transcripts  # the partial one beside the retry's
    started = [e for e in read_jsonl(run / "run.jsonl") if e["type"] == "child_started"]
    assert [e["host"] for e in started] == ["a", "b"]


def test_a_child_that_crashes_after_hello_is_not_retried_unless_asked(
    api_server: MessagesServer, tmp_path: Path, root: Path, workspace: Path
) -> None:
    for name in ("a", "b"):
        host(root, name)

    def handler(req: Request) -> Reply:
        if req.turn == 0:  # the child's command kills it: a crash, not a lost link
            return tool_reply("Bash", {"command": "kill -TERM $PPID; sleep 5"})
        return text_reply("done")

    api_server.handler = handler
    args = ["-C", str(workspace), *remote(root, "a:1,b:1")]
    done = run_task(args, cli_env(api_server), tmp_path)
    assert done.returncode != 0
    assert "crashed" in done.stderr
    assert not (root / "b" / "launches").exists()

    again = run_task([*args, "--retry-crashed"], cli_env(api_server), tmp_path)
    assert (root / "b" / "launches").exists()
    assert "crashed" in again.stderr  # it crashed there too, once: retries are bounded


def test_a_cut_link_after_hello_moves_the_task_to_another_host(
    api_server: MessagesServer, tmp_path: Path, root: Path, workspace: Path
) -> None:
    for name in ("a", "b"):
        host(root, name)

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("Bash", {"command": "cat marker.txt"})
        (root / "a" / "cut").touch()  # ssh on a exits 255 before this reply is relayed
        return text_reply(req.tool_results[0]["content"], delay=0.5)

    api_server.handler = handler
    done = run_task(["-C", str(workspace), *remote(root, "a:1,b:1")], cli_env(api_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "on host b"
    assert "lost its link to host a" in done.stderr and "retry 1 of 2" in done.stderr


def test_a_queue_wait_counts_against_the_launch_timeout_and_then_moves_the_task(
    api_server: MessagesServer, tmp_path: Path, root: Path, workspace: Path
) -> None:
    host(root, "busy").parent.joinpath("queue").write_text("300")
    host(root, "free")
    api_server.handler = probe_then_answer()
    args = ["-C", str(workspace), *remote(root, "busy:1,free:1", "--launch-timeout", "2")]
    done = run_task(args, cli_env(api_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("on host free")
    assert "did not start on host busy: the host server said nothing within 2 s" in done.stderr


@pytest.mark.parametrize("host_server", ["1", "0"], ids=["host-server", "launch-per-child"])
def test_a_login_that_prints_to_stdout_is_a_launch_failure_that_says_so(
    api_server: MessagesServer, tmp_path: Path, root: Path, workspace: Path, host_server: str
) -> None:
    host(root, "chatty").parent.joinpath("banner").write_text("Welcome to chatty!\n")
    env = cli_env(api_server, ISOAGENT_HOST_SERVER=host_server)
    done = run_task(["-C", str(workspace), *remote(root, "chatty:1")], env, tmp_path)
    assert done.returncode == 4, done.stderr
    assert "launch_failed" in done.stderr and "did not start on host chatty" in done.stderr
    assert "print to stdout" in done.stderr
    assert api_server.requests == []


@pytest.mark.parametrize("sandbox", ["workspace", "off"])
def test_a_remote_childs_command_cannot_forge_frames_through_its_host_server(
    api_server: MessagesServer, tmp_path: Path, root: Path, workspace: Path, sandbox: str
) -> None:
    """The host server holds every child's pipes on its host: a command that could write
    into its descriptors could speak for any child there."""
    (host(root, "a") / "ws" / "attack.py").write_text(ATTACK)

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("Bash", {"command": f"{sys.executable} attack.py"})
        return text_reply("CHILD SAW: " + req.tool_results[0]["content"])

    api_server.handler = handler
    args = ["-C", str(workspace), "--sandbox", sandbox, *remote(root, "a:1")]
    done = run_task(args, cli_env(api_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("CHILD SAW: ") and FORGED not in done.stdout.split("\n")[0]
    ancestors = [int(pid) for pid in re.findall(r"\bANCESTOR (\d+)", done.stdout)]
    if sandbox == "workspace" and pid_namespaces_available():  # nothing above pid 1, its agent
        assert ancestors[-1] == 1, ancestors
        child_and_server = [1]
    else:
        started = [e for e in read_jsonl(run_dirs(workspace)[0] / "run.jsonl") if "pid" in e]
        child = started[0]["pid"]
        child_and_server = ancestors[ancestors.index(child) :][:2]  # forked by the server
        assert len(child_and_server) == 2, done.stdout
    for what, pid in re.findall(r"\b(WROTE|ENVIRON|MEM) (\d+)", done.stdout):
        assert int(pid) not in child_and_server, f"{what} {pid}: {done.stdout}"


def test_run_delegates_to_a_child_on_a_host(
    api_server: MessagesServer, tmp_path: Path, root: Path, workspace: Path
) -> None:
    host(root, "a")
    api_server.handler = delegating(
        [tool_reply("Bash", {"command": "cat marker.txt"}), text_reply("ok")]
    )
    done = run_cli(
        ["run", "go", "-C", str(workspace), *remote(root, "a:1")], cli_env(api_server), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("error=False :: ok"), done.stdout
    started = [
        e for e in read_jsonl(run_dirs(workspace)[0] / "run.jsonl") if e["type"] == "child_started"
    ]
    assert [e["host"] for e in started] == ["a"]
