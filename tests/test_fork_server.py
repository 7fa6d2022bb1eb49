"""The fork server: children forked ready from a preloaded process, each still its own process
with its own pipes, session and environment; and plain spawning when it is off or gone."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS
from isoagent.child.agent.process_tree import PPID, stat_fields
from isoagent.parent.children import forkserver
from isoagent.parent.children.connection import write_frame
from isoagent.parent.children.forkserver import ForkServer, ForkServerUnavailable
from isoagent.parent.children.launch import (
    FORK_SERVER_COMMAND,
    PACKAGE_ROOT,
    allowed_environment,
    child_environment,
    fork_server_for,
)
from isoagent.parent.children.process import ChildProcess
from isoagent.parent.children.sandbox_policy import pid_namespaces_available
from isoagent.protocol import Hello, ModelCall, ModelReply, Result, Task, TextBlock, ToolUseBlock
from tests.conftest import cli_env
from tests.support.cli import read_jsonl, run_dirs, start_cli, started_children
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.support.processes import alive, wait_for

T = TypeVar("T")
BASH_OWN = {"PWD", "SHLVL", "_", "OLDPWD"}  # what bash adds to the environment it was given


def with_server(body: Callable[[ForkServer], Awaitable[T]], server: ForkServer | None = None) -> T:
    """Run ``body`` with a fork server (the session's kind unless given), closed afterwards."""

    async def main() -> T:
        forks = server or fork_server_for(None)
        assert forks is not None
        try:
            return await body(forks)
        finally:
            forks.close()

    return asyncio.run(main())


async def spawn(server: ForkServer, tmp: Path, cwd: Path = PACKAGE_ROOT) -> ChildProcess:
    return await server.spawn(child_environment(str(tmp)), cwd)


async def hello(process: ChildProcess) -> Hello:
    frame = await asyncio.wait_for(process.frames.next(), 30)
    assert isinstance(frame, Hello), frame
    return frame


async def run_bash(process: ChildProcess, command: str, workdir: Path) -> str:
    """Be the parent of one task: the model runs ``command`` with bash, then answers.
    Returns the command's output as the child reported it."""
    await hello(process)
    agent = BUILTIN_AGENTS["general-purpose"]
    await write_frame(process.stdin, Task("go", agent, "m", str(workdir), str(workdir)))
    output = ""
    while True:
        frame = await asyncio.wait_for(process.frames.next(), 30)
        if isinstance(frame, ModelCall) and frame.turn == 0:
            use = ToolUseBlock("toolu_1", "Bash", {"command": command})
            await process.answer(ModelReply(0, [use]))
        elif isinstance(frame, ModelCall):
            output = str(frame.messages[-1].content[0].content)  # type: ignore[union-attr]
            await process.answer(ModelReply(frame.turn, [TextBlock("done")]))
        elif isinstance(frame, Result):
            assert frame.status == "ok", frame.error
            return output
        elif frame is None:
            raise AssertionError("the child ended before its Result")


def ppid(pid: int) -> int:
    return int(stat_fields(pid)[PPID])


# --- the fork server itself --------------------------------------------------------


def test_forked_children_are_distinct_processes_each_leading_its_own_session(
    tmp_path: Path,
) -> None:
    async def body(server: ForkServer) -> None:
        children = [await spawn(server, tmp_path) for _ in range(3)]
        hellos = await asyncio.gather(*(hello(child) for child in children))
        pids = [child.pid for child in children]
        assert len(set(pids)) == 3 and os.getpid() not in pids and server.pid not in pids
        assert [h.pid for h in hellos] == pids  # each speaks on its own pipes
        for pid in pids:
            assert os.getsid(pid) == pid  # a session (and process group) of its own
            assert ppid(pid) == server.pid
        for child in children:
            child.stdin.close()  # EOF instead of a Task: the child says so and exits 2
        assert all([await child.wait_exit(10) for child in children])
        assert [child.returncode for child in children] == [2, 2, 2]
        assert b"expected a Task frame" in await children[0].stderr.read()
        for child in children:
            child.close_pipes()

    with_server(body)


def test_children_asked_for_at_once_are_each_forked_onto_their_own_pipes(
    tmp_path: Path,
) -> None:
    async def body(server: ForkServer) -> None:
        children = await asyncio.gather(*(spawn(server, tmp_path) for _ in range(8)))
        hellos = await asyncio.gather(*(hello(child) for child in children))
        assert [h.pid for h in hellos] == [child.pid for child in children]
        assert len({child.pid for child in children}) == 8
        for child in children:
            child.stdin.close()
        assert all(await asyncio.gather(*(child.wait_exit(10) for child in children)))
        for child in children:
            child.close_pipes()

    with_server(body)


def test_requests_that_fill_the_socket_while_the_server_is_busy_all_get_their_child(
    tmp_path: Path,
) -> None:
    """Eight 200 kB requests do not fit in the socket's buffer: senders wait their turn."""
    env = {**child_environment(str(tmp_path)), "LC_PADDING": "x" * 200_000}

    async def body(server: ForkServer) -> None:
        first = await spawn(server, tmp_path)
        await hello(first)  # the server is up and serving
        os.kill(server.pid, signal.SIGSTOP)  # busy: it reads nothing for a while
        asks = [asyncio.ensure_future(server.spawn(env, PACKAGE_ROOT)) for _ in range(8)]
        await asyncio.sleep(0.3)
        os.kill(server.pid, signal.SIGCONT)
        children = await asyncio.wait_for(asyncio.gather(*asks), 30)
        hellos = await asyncio.gather(*(hello(child) for child in children))
        assert [h.pid for h in hellos] == [child.pid for child in children]
        for child in [first, *children]:
            child.stdin.close()
            await child.wait_exit(10)
            child.close_pipes()

    with_server(body)


def test_a_server_that_never_answers_sends_every_waiting_request_to_plain_spawning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forkserver, "ANSWER_TIMEOUT", 0.5)  # 10 s in use; only shorter
    mute = ForkServer(
        [sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path, env={}
    )  # the server's command gets its socket's fd number appended; it never reads it

    async def body(server: ForkServer) -> list[BaseException | ChildProcess]:
        asks = (server.spawn(child_environment(str(tmp_path)), tmp_path) for _ in range(4))
        return await asyncio.gather(*asks, return_exceptions=True)

    outcomes = with_server(body, mute)
    assert all(isinstance(o, ForkServerUnavailable) for o in outcomes), outcomes
    assert "did not answer within 0.5 s" in str(outcomes[0])


def test_server_launched_before_the_event_loop_and_never_used_is_gone_after_close() -> None:
    server = fork_server_for(None)
    assert server is not None
    server.launch()  # as the CLI does before its SDK import
    assert alive(server.pid)
    server.close()  # that CLI failed (no key, say): no loop ever ran
    assert not alive(server.pid)  # killed and reaped at once


@pytest.mark.skipif(not pid_namespaces_available(), reason="no pid namespace for children here")
def test_a_child_asked_for_with_a_pid_namespace_is_pid_1_there(tmp_path: Path) -> None:
    async def body(server: ForkServer) -> tuple[int, str, int | None]:
        env = child_environment(str(tmp_path))
        child = await server.spawn(env, PACKAGE_ROOT, pid_namespace=True)
        said = (await hello(child)).pid
        status = Path(f"/proc/{child.pid}/status").read_text()
        nspid = next(line for line in status.splitlines() if line.startswith("NSpid:"))
        child.stdin.close()  # EOF instead of a Task
        await child.wait_exit(10)
        child.close_pipes()
        return said, nspid, child.returncode

    said, nspid, code = with_server(body)
    assert said == 1 and nspid.split()[-1] == "1"  # here its pid is the server's fork's
    assert code == 2


def test_child_killed_by_a_signal_reports_the_signal_as_a_negative_returncode(
    tmp_path: Path,
) -> None:
    async def body(server: ForkServer) -> int | None:
        child = await spawn(server, tmp_path)
        await hello(child)
        os.kill(child.pid, signal.SIGKILL)
        assert await child.wait_exit(10)
        child.close_pipes()
        return child.returncode

    assert with_server(body) == -signal.SIGKILL


def test_exception_in_a_forked_child_ends_that_child_and_the_server_serves_on(
    tmp_path: Path,
) -> None:
    async def body(server: ForkServer) -> None:
        broken = await spawn(server, tmp_path, cwd=tmp_path / "missing")  # chdir raises
        assert await broken.wait_exit(10)
        assert broken.returncode == 1
        stderr = (await broken.stderr.read()).decode()
        assert "Traceback" in stderr and "FileNotFoundError" in stderr
        broken.close_pipes()
        child = await spawn(server, tmp_path)
        assert (await hello(child)).pid == child.pid
        child.stdin.close()
        assert await child.wait_exit(10) and child.returncode == 2
        child.close_pipes()

    with_server(body)


def test_forked_child_environment_is_what_it_was_given_and_nothing_of_the_server(
    tmp_path: Path,
) -> None:
    server = ForkServer(
        FORK_SERVER_COMMAND,
        cwd=PACKAGE_ROOT,
        env={**allowed_environment(), "LC_ONLY_THE_SERVER": "1"},
    )
    given = child_environment(str(tmp_path))

    async def body(forks: ForkServer) -> str:
        child = await forks.spawn(given, PACKAGE_ROOT)
        try:
            return await run_bash(child, "env -0 | base64 -w0", tmp_path)
        finally:
            await child.wait_exit(10)
            child.close_pipes()

    output = base64.b64decode(with_server(body, server)).decode()
    seen = dict(entry.split("=", 1) for entry in output.split("\0") if entry)
    assert {k: v for k, v in seen.items() if k not in BASH_OWN} == given


def test_server_exits_when_closed_and_its_children_live_on(tmp_path: Path) -> None:
    async def body(server: ForkServer) -> None:
        child = await spawn(server, tmp_path)
        await hello(child)
        server_pid = server.pid
        server.close()
        for _ in range(200):
            if not alive(server_pid):
                break
            await asyncio.sleep(0.02)
        assert not alive(server_pid)
        assert alive(child.pid)  # it ends on its own stdin EOF, not with the server
        child.stdin.close()
        assert await child.wait_exit(10)  # no Exited can come: its end is still seen
        child.close_pipes()

    with_server(body)


def test_a_child_outliving_the_servers_reader_still_has_its_end_seen(tmp_path: Path) -> None:
    """An event loop that shuts down cancels the reader before the children are ended (as
    an interrupted CLI's loop may): their ends are still seen, not waited for in vain."""

    async def body(server: ForkServer) -> bool:
        child = await spawn(server, tmp_path)
        await hello(child)
        reader = server._reader
        assert reader is not None
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        os.kill(child.pid, signal.SIGTERM)
        seen = await child.wait_exit(30)
        child.close_pipes()
        return seen

    assert with_server(body)


# --- through the CLI ----------------------------------------------------------------


def held(workdir: Path, name: str = "held") -> str:
    """A bash command that notes what it can read of its agent's environment (pid 1 of its
    namespace), waits while ``workdir/name`` exists (it makes it) so the test can look at
    its child from outside, then lists its own environment."""
    hold = workdir / name
    return (
        f"cat /proc/1/environ > {workdir}/agent.env; touch {hold}; "
        f"while [ -e {hold} ]; do sleep 0.05; done; env"
    )


def probing(workdir: Path, name: str = "held") -> Callable[[Request], Reply]:
    """The child runs ``held(workdir, name)`` with bash, then answers."""
    return lambda req: [
        tool_reply("Bash", {"command": held(workdir, name)}),
        text_reply("done"),
    ][min(req.turn, 1)]


def holding_child(workdir: Path, name: str = "held") -> int:
    """The pid of the child holding at ``held(workdir, name)``, once it holds."""
    assert wait_for((workdir / name).exists), "the child never ran"
    return started_children(workdir)[-1]


def parent_of_held(workdir: Path, name: str = "held") -> int:
    """The pid of the parent of the child holding at ``name``; then it may go on."""
    parent = ppid(holding_child(workdir, name))
    (workdir / name).unlink()
    return parent


def test_cli_forks_children_from_a_server_without_credentials(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = probing(tmp_path)
    env = cli_env(api_server, ANTHROPIC_AUTH_TOKEN="token-xyz", SOME_SECRET="hush")
    cli = start_cli(["task", "probe"], env, cwd=tmp_path)
    server = ppid(holding_child(tmp_path))
    assert b"child.forkserver" in Path(f"/proc/{server}/cmdline").read_bytes()
    (tmp_path / "held").unlink()
    _, stderr = cli.communicate(timeout=60)
    assert cli.returncode == 0, stderr
    # the child's command cannot even read its agent's environment: it is not dumpable
    assert (tmp_path / "agent.env").read_bytes() == b""
    child_env = next(r for r in api_server.requests if r.turn == 1).tool_results[0]["content"]
    lines = {line.split("=", 1)[0] for line in child_env.splitlines() if "=" in line}
    expected = set(child_environment("x", env))
    assert lines - BASH_OWN == expected
    assert "test-key" not in child_env and "token-xyz" not in child_env


def test_fork_server_off_starts_children_from_the_cli(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = probing(tmp_path)
    # in its own process (the warm daemon's sessions fork from the daemon's fork server)
    env = cli_env(api_server, ISOAGENT_FORK_SERVER="0", ISOAGENT_DAEMON="0")
    cli = start_cli(["task", "probe"], env, cwd=tmp_path)
    assert parent_of_held(tmp_path) == cli.pid
    _, stderr = cli.communicate(timeout=60)
    assert cli.returncode == 0, stderr
    assert "fork server" not in stderr


def test_fork_server_that_dies_gives_one_warning_and_children_start_plainly(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """The first child's fork server is killed while the child works; the child still
    finishes, and the second child is started by the CLI itself."""

    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn < 2:
                prompt = ["first", "second"][req.turn]
                args = {"description": prompt, "prompt": prompt, "subagent_type": "general-purpose"}
                return tool_reply("Agent", args)
            return text_reply("both done")
        if req.turn == 0:
            return tool_reply("Bash", {"command": held(tmp_path, req.first_user_text)})
        return text_reply(f"{req.first_user_text} finished")

    api_server.handler = handler
    # in its own process, whose pid the second child's parent is
    cli = start_cli(["run", "go"], cli_env(api_server, ISOAGENT_DAEMON="0"), cwd=tmp_path)
    try:
        server = ppid(holding_child(tmp_path, "first"))
        assert b"child.forkserver" in Path(f"/proc/{server}/cmdline").read_bytes()
        os.kill(server, signal.SIGKILL)
        assert wait_for(lambda: not alive(server))
        (tmp_path / "first").unlink()
        assert parent_of_held(tmp_path, "second") == cli.pid  # the second child: plain
        _, stderr = cli.communicate(timeout=60)
    finally:
        cli.kill()
    assert cli.returncode == 0, stderr
    warnings = [line for line in stderr.splitlines() if "fork server" in line]
    assert len(warnings) == 1 and warnings[0].startswith("isoagent: warning: fork server")
    (run,) = run_dirs(tmp_path)
    results = [e for e in read_jsonl(run / "run.jsonl") if e["type"] == "child_result"]
    assert [r["result"]["status"] for r in results] == ["ok", "ok"]


def test_interrupt_leaves_no_fork_server_or_child(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    def handler(req: Request) -> Reply:
        if req.is_parent:
            args = {"description": "hang", "prompt": "hang", "subagent_type": "general-purpose"}
            return tool_reply("Agent", args)
        return tool_reply("Bash", {"command": held(tmp_path)})

    api_server.handler = handler
    # in its own process, with a fork server of its own (the warm daemon's outlives a run)
    cli = start_cli(["run", "go"], cli_env(api_server, ISOAGENT_DAEMON="0"), cwd=tmp_path)
    try:
        child = holding_child(tmp_path)
        server = ppid(child)
        assert alive(child) and alive(server) and server != cli.pid
        cli.send_signal(signal.SIGINT)
        _, stderr = cli.communicate(timeout=30)
    finally:
        cli.kill()
    assert cli.returncode == 130, stderr
    assert "Traceback" not in stderr and "fork server" not in stderr
    assert wait_for(lambda: not alive(child) and not alive(server), timeout=5)


def test_child_command_variable_bypasses_the_fork_server() -> None:
    assert fork_server_for(["python", "-m", "child"]) is None
