"""Nothing a child starts outlives it, and root's commands are held to the process limit.

The child's bash plays what a process does to escape a clean-up that looks for its
session or an environment tag: ``setsid -f env -i``, ``env -u`` the tag, a double
fork into a daemon. Each leaves a pid file; after the run every one is gone, whether
the child ended normally, timed out, crashed or the run was interrupted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import zlib
from pathlib import Path

import pytest

from isoagent.child.agent.process_tree import TAG_VARIABLE
from isoagent.parent.children.cgroups import RunCgroups
from tests.conftest import cli_env
from tests.support.cli import ISOAGENT, kill_child_once, run_cli, start_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.support.processes import running, wait_for
from tests.support.scripts import child_runs

MISSING = " ".join(RunCgroups.open().missing)  # what this machine's cgroups lack, if anything
needs_cgroup = pytest.mark.skipif(
    "cgroup v2" in MISSING and "pids" in MISSING, reason="no cgroup this process may create"
)
needs_pids_cgroup = pytest.mark.skipif("pids" in MISSING, reason="no pids cgroup")
needs_memory_cgroup = pytest.mark.skipif("memory" in MISSING, reason="no memory cgroup")

DAEMON = """
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", sys.argv[1]])
    os._exit(0)
"""


def sleeps(folder: Path) -> list[str]:
    """How long each escaping process sleeps: a number of its folder's, by which the test
    finds it (a child's pids are its own namespace's, not the test's)."""
    mark = zlib.crc32(str(folder).encode())
    return [f"30{n}.{mark}" for n in (1, 2, 3)]


def escapes(folder: Path) -> str:
    """A bash command that leaves three processes behind, noting that each started."""
    (folder / "daemon.py").write_text(DAEMON)
    daemon, setsid, untagged = sleeps(folder)
    return (
        f"cd {folder}; "
        f"setsid -f env -i sh -c 'echo $$ > setsid.pid; exec sleep {setsid}'; "
        f"(env -u {TAG_VARIABLE} sh -c 'echo $$ > untagged.pid; exec sleep {untagged}' &); "
        f"{sys.executable} daemon.py {daemon}; "
        "while [ ! -s setsid.pid ] || [ ! -s untagged.pid ] || "
        f"! pgrep -f 'sleep {daemon}' > daemon.pid; do sleep 0.05; done; echo ESCAPED"
    )


def escaped(folder: Path) -> bool:
    """Whether each of ``escapes(folder)``'s processes has started."""
    files = [folder / f"{name}.pid" for name in ("setsid", "untagged", "daemon")]
    return all(f.exists() and f.read_text().strip() for f in files)


def left_running(folders: tuple[Path, ...]) -> list[int]:
    return [pid for f in folders for seconds in sleeps(f) for pid in running("sleep", seconds)]


def assert_all_ended(*folders: Path) -> None:
    assert wait_for(lambda: all(escaped(folder) for folder in folders), 30)
    wait_for(lambda: not left_running(folders), 10)
    left = left_running(folders)
    for pid in left:  # do not leave them running for the next test
        os.kill(pid, signal.SIGKILL)
    assert not left, f"outlived their child: {left}"


@pytest.mark.parametrize("options", [[], ["--sandbox", "off"]], ids=["sandboxed", "sandbox-off"])
def test_nothing_a_child_starts_outlives_its_normal_end(
    api_server: MessagesServer, tmp_path: Path, options: list[str]
) -> None:
    api_server.handler = child_runs("general-purpose", escapes(tmp_path))
    done = run_cli(["run", "go", *options], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ESCAPED" in done.stdout
    assert_all_ended(tmp_path)


@needs_cgroup
def test_nothing_a_child_starts_outlives_its_crash(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """The child agent is killed first: its orphans are no longer below it."""
    api_server.handler = child_runs("general-purpose", escapes(tmp_path) + "; sleep 300")
    killer = kill_child_once(lambda: escaped(tmp_path), tmp_path)
    done = run_cli(["run", "go"], cli_env(api_server), cwd=tmp_path)
    killer.join()
    assert done.returncode == 0, done.stderr
    assert "SIGKILL" in done.stdout
    assert_all_ended(tmp_path)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root and unshare to cover /sys/fs/cgroup for the CLI",
)
def test_without_cgroups_nothing_outlives_a_killed_child(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """A user whose cgroups are not delegated: the child agent is killed first, so its
    orphans are no longer below it; the fork server, a subreaper, adopts and ends them."""
    api_server.handler = child_runs("general-purpose", escapes(tmp_path) + "; sleep 300")
    no_cgroups = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs none /sys/fs/cgroup && exec "$@"']
    command = [*no_cgroups, "sh", *ISOAGENT]
    killer = kill_child_once(lambda: escaped(tmp_path), tmp_path)
    done = run_cli(["run", "go"], cli_env(api_server), cwd=tmp_path, process=True, command=command)
    killer.join()
    assert done.returncode == 0, done.stderr
    assert "children run without a cgroup v2" in done.stderr  # as such a user's would
    assert "SIGKILL" in done.stdout
    assert_all_ended(tmp_path)


def test_nothing_a_child_starts_outlives_its_timeout(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = child_runs("general-purpose", escapes(tmp_path) + "; sleep 300")
    done = run_cli(["run", "go", "--timeout", "8"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "timed out" in done.stdout
    assert_all_ended(tmp_path)


def test_nothing_a_child_starts_outlives_ctrl_c(api_server: MessagesServer, tmp_path: Path) -> None:
    api_server.handler = child_runs("general-purpose", escapes(tmp_path) + "; sleep 300")
    cli = start_cli(["run", "go"], cli_env(api_server), cwd=tmp_path)
    try:
        assert wait_for(lambda: escaped(tmp_path), 30)
        cli.send_signal(signal.SIGINT)
        cli.communicate(timeout=30)
    finally:
        cli.kill()
    assert cli.returncode == 130
    assert_all_ended(tmp_path)


@needs_pids_cgroup
def test_process_limit_binds_a_root_child(api_server: MessagesServer, tmp_path: Path) -> None:
    """RLIMIT_NPROC does not bind root; the child's pids cgroup does."""
    # Python, not bash: bash retries a refused fork for seconds; the sleepers let go of stdout
    fork_many = (
        "python3 -c 'import os, time\n"
        "for n in range(80):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as exc:\n"
        '        print(exc.strerror, "after", n); break\n'
        "    if pid == 0:\n"
        '        os.dup2(os.open("/dev/null", os.O_WRONLY), 1); time.sleep(30); os._exit(0)\n'
        "'; echo FORKED"
    )
    api_server.handler = child_runs("general-purpose", fork_many)
    done = run_cli(["run", "go", "--max-processes", "20"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "FORKED" in done.stdout
    assert "Resource temporarily unavailable" in done.stdout


@needs_cgroup
def test_a_runs_cgroup_folders_are_gone_after_it(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """Each child's folders go when it ends; the run's own, in each hierarchy, at the end."""
    parents = [run.parent for run in RunCgroups.open().roots.values()]
    api_server.handler = child_runs("general-purpose", "true")
    lines = [json.dumps({"prompt": f"task {n}"}) for n in range(3)]
    (tmp_path / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    limits = ["--max-processes", "64", "--memory-mb", "2048"]  # every hierarchy there is
    cli = start_cli(["batch", "tasks.jsonl", "-j", "3", *limits], cli_env(api_server), cwd=tmp_path)
    _, stderr = cli.communicate(timeout=120)
    assert cli.returncode == 0, stderr
    assert [
        p / f"isoagent-{cli.pid}" for p in parents if (p / f"isoagent-{cli.pid}").exists()
    ] == []


@needs_cgroup
def test_an_emptied_cgroup_is_the_next_childs_and_still_ends_all_it_holds(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """One child at a time: the second gets the first's cgroup back, emptied, and what it
    leaves behind ends with it as the first's did."""
    folders = [tmp_path / "first", tmp_path / "second"]
    started = iter(folders)

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            where = "grep -E '^0::|pids' /proc/self/cgroup | sort; "
            return tool_reply("Bash", {"command": where + escapes(next(started))})
        return text_reply(req.tool_results[0]["content"])

    for folder in folders:
        folder.mkdir()
    api_server.handler = handler
    (tmp_path / "tasks.jsonl").write_text('{"prompt": "one"}\n{"prompt": "two"}\n')
    args = ["batch", "tasks.jsonl", "-j", "1", "-o", "out.jsonl"]
    done = run_cli(args, cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first, second = (json.loads(line)["summary"] for line in (tmp_path / "out.jsonl").open())
    assert "ESCAPED" in first and "ESCAPED" in second
    assert first.split("ESCAPED")[0] == second.split("ESCAPED")[0]  # the same cgroups
    assert_all_ended(*folders)


def test_orphans_a_child_adopts_are_reaped_between_commands(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """A subreaper that never reaped would fill its pids cgroup with zombies."""
    count = "ps -o stat= --ppid $PPID | grep -c Z"

    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn == 0:
                args = {"description": "d", "prompt": "p", "subagent_type": "general-purpose"}
                return tool_reply("Agent", args)
            return text_reply(req.tool_results[0]["content"])
        commands = ["for i in $(seq 30); do setsid -f true; done; sleep 0.5", count]
        if req.turn < len(commands):
            return tool_reply("Bash", {"command": commands[req.turn]})
        return text_reply("ZOMBIES=" + req.tool_results[0]["content"].strip())

    api_server.handler = handler
    done = run_cli(["run", "go"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ZOMBIES=" in done.stdout
    assert int(done.stdout.split("ZOMBIES=")[1].split()[0].strip("[]")) < 5


@needs_memory_cgroup
def test_memory_limit_holds_over_all_of_a_childs_processes(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """Each process stays under --memory-mb (its own RLIMIT_AS); together they do not."""
    hog = f"{sys.executable} -c 'b = bytearray(400 << 20); import time; time.sleep(3)'"
    command = (
        f"for i in 1 2 3 4; do {hog} & done; for j in $(jobs -p); do wait $j; echo status=$?; done"
    )
    api_server.handler = child_runs("general-purpose", command)
    done = run_cli(["run", "go", "--memory-mb", "1024"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "status=137" in done.stdout  # the memory cgroup's OOM killer ended one
