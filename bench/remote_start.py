"""Child start on another host: ssh cold (a connection per child) and warm (a session over
the host's control master), against a local child forked and spawned plainly.

The "host" is a real sshd on 127.0.0.1 started for the run (tests/support/sshd.py), so
the numbers hold the whole ssh cost (key exchange, login, the login shell) but no
network latency. Each variant is started as the supervisor starts it and timed from
start until its Hello is read; the variants take turns.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.cli_start import SCRIPT
from bench.flows import two_turns
from bench.spawn import CHILD, _time_to_hello, _time_to_hello_forked
from bench.stats import Line, Stat, ratio, reference
from isoagent.parent.children.forkserver import ForkServer
from isoagent.parent.children.host_link import HostLink
from isoagent.parent.children.hosts import HostEntry
from isoagent.parent.children.launch import (
    FORK_SERVER_COMMAND,
    PACKAGE_ROOT,
    allowed_environment,
    exec_child,
)
from isoagent.parent.children.process import ChildProcess
from isoagent.parent.children.remote import Launcher, launcher_environment
from tests.conftest import cli_env
from tests.support import sshd
from tests.support.messages_server import MessagesServer

HOST = HostEntry("127.0.0.1")
HEARTBEAT = 15.0
KINDS = ("forked", "plain", "cold", "master", "session", "server")
WARM_TARGET = 3.0  # issue: a child on a warm host starts within 3x a local plain spawn


def _over(launcher: Launcher) -> Callable[[dict[str, str]], Awaitable[ChildProcess]]:
    async def start(_env: dict[str, str]) -> ChildProcess:
        env = launcher_environment()
        await launcher.warm(HOST, env)
        return await exec_child(launcher.argv(HOST), cwd=PACKAGE_ROOT, env=env)

    return start


async def _session_floor(launcher: Launcher) -> float:
    """Seconds for a warm ssh session that runs ``true``: the login shell without the child."""
    argv = launcher.argv(HOST)
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *argv[: len(argv) - len(launcher.command)], "true", env=launcher_environment()
    )
    await process.wait()
    return time.perf_counter() - started


async def _samples(server: sshd.Sshd, runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    # a template that names its own ControlMaster is left alone: a connection per child
    cold = Launcher(
        server.launcher().replace("ssh ", "ssh -o ControlMaster=no ", 1), sys.executable
    )
    warm = Launcher(server.launcher(), sys.executable)
    link = HostLink(warm.argv(HOST, server=HEARTBEAT), launcher_environment(), HEARTBEAT)
    on_link = lambda _env: link.spawn(60)  # noqa: E731
    fork_server = ForkServer(FORK_SERVER_COMMAND, cwd=PACKAGE_ROOT, env=allowed_environment())
    plain = lambda env: exec_child(CHILD, cwd=PACKAGE_ROOT, env=env)  # noqa: E731
    try:
        await _time_to_hello_forked(fork_server)  # each started once, not counted
        await _time_to_hello(plain, "plain child")
        await _time_to_hello(_over(cold), "ssh child")
        await _time_to_hello(_over(warm), "ssh child")  # starts the control master
        await _time_to_hello(on_link, "child on the host server")  # starts the host server
        for _ in range(runs):
            samples["forked"].append(await _time_to_hello_forked(fork_server) * 1000)
            samples["plain"].append(await _time_to_hello(plain, "plain child") * 1000)
            samples["cold"].append(await _time_to_hello(_over(cold), "ssh child") * 1000)
            samples["master"].append(await _time_to_hello(_over(warm), "ssh child") * 1000)
            samples["server"].append(await _time_to_hello(on_link, "remote child") * 1000)
            samples["session"].append(await _session_floor(warm) * 1000)
    finally:
        fork_server.close()
        warm.close()
        await link.close()
    return samples


def _batch_wall(server: sshd.Sshd, latency: float, tasks: int, where: list[str]) -> float:
    """Seconds for a whole ``isoagent batch`` of ``tasks`` two-turn tasks run ``where``."""
    with (
        tempfile.TemporaryDirectory(prefix="isoagent-bench-") as tmp,
        MessagesServer(two_turns(latency)) as api,
    ):
        work = Path(tmp)
        lines = [{"id": f"t{i}", "prompt": f"batch task {i}"} for i in range(tasks)]
        (work / "tasks.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        argv = [str(SCRIPT), "batch", "tasks.jsonl", "-o", "out.jsonl", "-C", str(work), *where]
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=work, env=cli_env(api), capture_output=True, text=True)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"bench batch failed: {done.stderr[-500:]}")
    return wall


def _batches(server: sshd.Sshd, latency: float, tasks: int, repeats: int) -> list[Line]:
    """A batch over two ssh "hosts" (two names of 127.0.0.1, 8 slots each) against the same
    batch on this machine at the same concurrency."""
    ssh = ["--hosts", "127.0.0.1:8,localhost:8", "--launcher", server.launcher()]
    ssh += ["--remote-python", sys.executable]
    local, remote = Stat([], "s"), Stat([], "s")
    for _ in range(repeats):  # interleaved, so that load from elsewhere hits both
        local.samples.append(_batch_wall(server, latency, tasks, ["-j", "16"]))
        remote.samples.append(_batch_wall(server, latency, tasks, ssh))
    what = f"`isoagent batch`, {tasks} tasks, {latency * 1000:.0f} ms per model call, whole command"
    return [
        Line(
            "remote start",
            f"{what}, over two ssh hosts x 8 slots",
            remote,
            ratio(remote, local, "local"),
        ),
        reference("remote start", f"{what}, here, `-j 16`", local),
    ]


def remote_start(runs: int, batch_tasks: int, skipped: list[str]) -> list[Line]:
    why = sshd.unavailable()
    if why:
        skipped.append(f"remote start: {why}")
        return []
    folder = Path(tempfile.mkdtemp(prefix="isoagent-bench-sshd-"))
    server = sshd.Sshd(folder)
    try:
        server.start()
        started = time.perf_counter()
        samples = asyncio.run(_samples(server, runs))
        batches = _batches(server, 0.25, batch_tasks, max(1, runs // 5))
        print(f"bench: remote start took {time.perf_counter() - started:.0f} s", file=sys.stderr)
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    forked, plain, cold, master, session, server = (Stat(samples[k], "ms") for k in KINDS)
    versus = lambda stat: ratio(stat, plain, "local plain")  # noqa: E731
    return [
        Line(
            "remote start",
            "ssh warm: forked by the host's host server, over its one ssh link, request "
            "until `Hello`",
            server,
            versus(server),
            f"≤ {WARM_TARGET:g}x local plain",
            server.median <= WARM_TARGET * plain.median,
            notes=[
                "sshd on 127.0.0.1 started for the run (no network latency). The host "
                "server (child/hostserver.py) is started once through `ssh -T {host} --`; "
                "each child is a fork there and a channel on its link. The per-child "
                "launches below pay the login shell's start-up (its .bashrc) every time."
            ],
        ),
        reference(
            "remote start",
            "ssh, a launch per child over the host's control master (`ISOAGENT_HOST_SERVER=0`)",
            master,
            versus(master),
        ),
        reference("remote start", "ssh cold: a new ssh connection per child", cold, versus(cold)),
        reference(
            "remote start",
            "ssh session over the control master running `true`: session and login shell",
            session,
            versus(session),
        ),
        reference("remote start", "local plain: `python -m isoagent.child`", plain),
        reference("remote start", "local, forked by the fork server", forked, versus(forked)),
        *batches,
    ]
