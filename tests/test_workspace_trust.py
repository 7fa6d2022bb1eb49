"""Workspace trust: a repository's ``.mcp.json``, settings files and agent files' servers are
used only once the user trusts the workspace (``isoagent trust``, a yes on a terminal,
``--trust`` for one run, Claude Code's own record), by content: a changed file asks again.
Untrusted, each file left out is one line and the run goes on."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from isoagent.parent.options import Options, settings_for
from tests.conftest import cli_env
from tests.support.cli import ISOAGENT, run_cli, shell
from tests.support.messages_server import MessagesServer, Request
from tests.test_mcp_servers import lookup_server, write_agent


def repository(tmp_path: Path) -> Path:
    """A workspace as a cloned repository ships it: an ``.mcp.json`` whose server notes its
    start (a ``started-`` file) in the workspace."""
    ws = tmp_path / "ws"
    (tmp_path / "outside").mkdir()
    ws.mkdir()
    servers = {"mcpServers": {"ctx": lookup_server(tmp_path / "outside")}}
    (ws / ".mcp.json").write_text(json.dumps(servers))
    return ws


def started(ws: Path) -> list[Path]:
    return list(ws.glob("started-*"))


def offered_mcp(server: MessagesServer) -> list[str]:
    first: Request = server.requests[0]
    return [name for name in first.tool_names if name.startswith("mcp__")]


def env_for(server: MessagesServer, tmp_path: Path) -> dict[str, str]:
    (tmp_path / "home").mkdir(exist_ok=True)
    return cli_env(server, HOME=str(tmp_path / "home"))


def left_out(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if "is not trusted" in line]


@pytest.mark.usefixtures("both_paths")
@pytest.mark.parametrize("command", [["run", "go"], ["-p", "go"]], ids=["run", "print"])
def test_a_repositorys_mcp_json_starts_nothing_before_the_workspace_is_trusted(
    api_server: MessagesServer, tmp_path: Path, command: list[str]
) -> None:
    ws = repository(tmp_path)
    done = run_cli(command, env_for(api_server, tmp_path), cwd=ws, input="")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"  # the run went on without it
    assert started(ws) == [] and offered_mcp(api_server) == []
    [line] = left_out(done)
    server = f"ctx ({sys.executable} -m tests.support.mcp_lookup_server {tmp_path / 'outside'})"
    assert line == (
        f"isoagent: {ws} is not trusted: .mcp.json left out (MCP servers {server} with env "
        f"PYTHONPATH); `isoagent trust {ws}` trusts it, --trust for one run"
    )


@pytest.mark.usefixtures("both_paths")
def test_isoagent_trust_records_the_files_by_content_and_a_changed_file_asks_again(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    ws = repository(tmp_path)
    env = env_for(api_server, tmp_path)
    trusted = run_cli(["trust"], env, cwd=ws)
    assert trusted.returncode == 0, trusted.stderr
    assert trusted.stderr.splitlines()[:2] == [
        f"isoagent: trusted {ws} as it is now:",
        f"  .mcp.json: MCP servers ctx ({sys.executable} -m tests.support.mcp_lookup_server "
        f"{tmp_path / 'outside'}) with env PYTHONPATH",
    ]
    done = run_cli(["run", "go"], env, cwd=ws)
    assert done.returncode == 0 and left_out(done) == [], done.stderr
    assert len(started(ws)) == 1 and offered_mcp(api_server) == ["mcp__ctx__lookup"]

    config = json.loads((ws / ".mcp.json").read_text())  # a pull adds a server
    config["mcpServers"]["more"] = {"command": "sh", "args": ["-c", "touch pulled-in"]}
    (ws / ".mcp.json").write_text(json.dumps(config))
    again = run_cli(["run", "go"], env, cwd=ws)
    assert again.returncode == 0, again.stderr
    assert len(started(ws)) == 1 and not (ws / "pulled-in").exists()
    [line] = left_out(again)
    assert (
        ".mcp.json left out (MCP servers ctx (" in line and "more (sh -c touch pulled-in)" in line
    )
    listed = run_cli(["trust", "--list"], env, cwd=ws)
    assert f"{ws}  " in listed.stdout and ".mcp.json (changed: asks again)" in listed.stdout

    assert run_cli(["trust"], env, cwd=ws).returncode == 0
    assert run_cli(["trust", "--revoke"], env, cwd=ws).stderr == f"isoagent: {ws} forgotten\n"
    revoked = run_cli(["run", "go"], env, cwd=ws)
    assert len(left_out(revoked)) == 1 and len(started(ws)) == 1


@pytest.mark.usefixtures("both_paths")
def test_trust_for_one_run_records_nothing(api_server: MessagesServer, tmp_path: Path) -> None:
    ws = repository(tmp_path)
    env = env_for(api_server, tmp_path)
    once = run_cli(["run", "go", "--trust"], env, cwd=ws)
    assert once.returncode == 0 and left_out(once) == [], once.stderr
    assert len(started(ws)) == 1
    assert str(ws) not in run_cli(["trust", "--list"], env, cwd=ws).stdout
    after = run_cli(["run", "go"], env, cwd=ws)
    assert len(left_out(after)) == 1 and len(started(ws)) == 1


def on_terminal(args: list[str], answer: str, env: dict[str, str], cwd: Path) -> str:
    """``isoagent ARGS`` with its stdin and stderr on a terminal (a pty), ``answer`` typed at
    its question: what the terminal showed."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [*ISOAGENT, *args], stdin=terminal, stdout=subprocess.DEVNULL, stderr=terminal,
        env=env, cwd=cwd, start_new_session=True,
    )  # fmt: skip
    os.close(terminal)
    shown, deadline = b"", time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # the terminal's last holder closed it
                    break
                if not chunk:
                    break
                shown += chunk
                if b"[y/N]" in shown and answer:
                    os.write(controller, answer.encode())
                    answer = ""
            elif process.poll() is not None:
                break
        assert process.wait(timeout=60) == 0, shown
    finally:
        os.close(controller)
        if process.poll() is None:
            process.kill()
            process.wait()
    return shown.decode(errors="replace").replace("\r\n", "\n")


# how a process runs its command: handed to the warm daemon (a session process with no
# controlling terminal, on the client's descriptors), or in its own process
HOW = {"daemon": {}, "own-process": {"ISOAGENT_DAEMON": "0"}}


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("answer", ["\n", "y\n"], ids=["default-no", "yes"])
def test_on_a_terminal_run_asks_and_the_default_is_no(
    api_server: MessagesServer, tmp_path: Path, answer: str, how: str
) -> None:
    ws = repository(tmp_path)
    env = env_for(api_server, tmp_path) | HOW[how]
    shown = on_terminal(["run", "go"], answer, env, ws)
    assert f"isoagent: {ws} is not trusted yet; its files would run or grant this:" in shown
    assert "  .mcp.json: MCP servers ctx (" in shown
    assert "Trust them (recorded by content: a change asks again)? [y/N]" in shown
    if answer == "y\n":
        assert len(started(ws)) == 1 and "left out" not in shown
        later = run_cli(["run", "go"], env, cwd=ws)  # recorded: no question, no line
        assert left_out(later) == [] and len(started(ws)) == 2
    else:
        assert started(ws) == [] and f"{ws} is not trusted: .mcp.json left out" in shown


@pytest.mark.parametrize("how", HOW)
def test_with_stdin_closed_nobody_is_asked_and_the_run_goes_on(
    api_server: MessagesServer, tmp_path: Path, how: str
) -> None:
    ws = repository(tmp_path)
    done = shell("isoagent run go <&-", env_for(api_server, tmp_path) | HOW[how], ws)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and started(ws) == []
    assert len(left_out(done)) == 1 and len(done.stderr.splitlines()) == 1, done.stderr


def claude_json(home: Path, projects: dict[str, dict[str, object]]) -> None:
    (home / ".claude.json").write_text(json.dumps({"projects": projects}))


@pytest.mark.usefixtures("both_paths")
def test_claude_codes_trust_and_approval_answer_for_files_isoagent_has_not_seen(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """Claude Code trusts a folder above the workspace (it counts for those below) and
    approves the server: isoagent takes it as the user's yes and records the file's content,
    so that a later change asks again, which Claude Code's record by path would not."""
    ws = repository(tmp_path)
    env = env_for(api_server, tmp_path)
    claude_json(tmp_path / "home", {str(tmp_path): {"hasTrustDialogAccepted": True}})
    (ws / ".claude").mkdir()
    unapproved = run_cli(["run", "go"], env, cwd=ws)
    assert len(left_out(unapproved)) == 1 and started(ws) == []  # no server approved

    settings = tmp_path / "home" / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"enabledMcpjsonServers": ["ctx"]}))
    done = run_cli(["run", "go"], env, cwd=ws)
    assert done.returncode == 0 and left_out(done) == [], done.stderr
    assert f"isoagent: .mcp.json trusted as Claude Code trusts {tmp_path} (" in done.stderr
    assert "recorded: a change asks again" in done.stderr
    assert len(started(ws)) == 1

    claude_json(tmp_path / "home", {})  # the record stands on its own now
    (ws / ".mcp.json").write_text((ws / ".mcp.json").read_text().replace("ctx", "ctx2"))
    changed = run_cli(["run", "go"], env, cwd=ws)
    assert len(left_out(changed)) == 1 and len(started(ws)) == 1


def test_a_server_claude_code_disables_never_starts_trusted_or_not(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    ws = repository(tmp_path)
    env = env_for(api_server, tmp_path)
    (ws / ".claude").mkdir()
    (ws / ".claude" / "settings.local.json").write_text('{"disabledMcpjsonServers": ["ctx"]}')
    done = run_cli(["-p", "go", "--trust", "--output-format", "stream-json", "--verbose"],
                   env, cwd=ws, input="")  # fmt: skip
    assert done.returncode == 0, done.stderr
    init = json.loads(done.stdout.splitlines()[0])
    assert init["mcp_servers"] == [] and started(ws) == []


def test_an_agent_files_own_server_is_left_out_of_an_untrusted_workspace(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    inline = json.dumps([{"own": {"command": "sh", "args": ["-c", "touch ran"]}}])
    write_agent(ws, "owner", f"mcpServers: {inline}")
    write_agent(ws, "plain", "tools: Read")
    said: list[str] = []
    untrusted = settings_for(Options(workdir=ws), said.append)
    assert untrusted.agents["owner"].mcp_servers == [] and "plain" in untrusted.agents
    assert said == [
        f"{ws} is not trusted: .claude/agents/owner.md left out (agent owner's MCP servers "
        f"own (sh -c touch ran)); `isoagent trust {ws}` trusts it, --trust for one run"
    ]
    trusted = settings_for(Options(workdir=ws, trust=True), said.append)
    assert [s.name for s in trusted.agents["owner"].mcp_servers] == ["own"] and len(said) == 1


@pytest.mark.usefixtures("both_paths")
def test_print_mode_applies_the_workspaces_settings_hooks_only_once_trusted(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """Its deny rules apply untrusted: they only take away."""
    ws = tmp_path / "ws"
    (ws / ".claude").mkdir(parents=True)
    hook = {"hooks": [{"type": "command", "command": "echo ran >> hook-ran"}]}
    settings = {"hooks": {"UserPromptSubmit": [hook]}, "permissions": {"deny": ["Bash"]}}
    (ws / ".claude" / "settings.json").write_text(json.dumps(settings))
    env = env_for(api_server, tmp_path)
    done = run_cli(["-p", "go"], env, cwd=ws, input="")
    assert done.returncode == 0, done.stderr
    assert not (ws / "hook-ran").exists()
    [line] = left_out(done)
    assert ".claude/settings.json left out (hooks)" in line
    assert "Bash" not in api_server.requests[0].tool_names
    allowing = json.dumps({**settings, "permissions": {"allow": ["Bash(rm:*)"]}})
    (ws / ".claude" / "settings.local.json").write_text(allowing)
    both = run_cli(["-p", "go"], env, cwd=ws, input="")
    assert ".claude/settings.local.json left out (hooks; permissions.allow)" in both.stderr
    assert run_cli(["-p", "go", "--trust"], env, cwd=ws, input="").returncode == 0
    assert (ws / "hook-ran").read_text() == "ran\nran\n"  # each file's hook
    assert "Bash" not in api_server.requests[-1].tool_names


@pytest.mark.parametrize("name", ["settings.json", "settings.local.json"])
def test_a_repositorys_settings_file_that_is_a_fifo_holds_nothing_up(
    api_server: MessagesServer, tmp_path: Path, name: str
) -> None:
    """A FIFO shipped in a repository's ``.claude/``: reading it would wait for a writer that
    never comes, and the run would hang before its first call. It is no settings file."""
    ws = tmp_path / "ws"
    (ws / ".claude").mkdir(parents=True)
    os.mkfifo(ws / ".claude" / name)
    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    try:
        done = run_cli(["-p", "hi"], env, cwd=ws, input="", timeout=30, process=True)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the run waited on .claude/{name}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"
