"""The OS, not the prompt, keeps read-only agents read-only and writers inside the workspace."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS
from isoagent.parent.children.sandbox_policy import SandboxRefused, landlock_available, sandbox_mode
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer
from tests.support.scripts import child_runs

needs_landlock = pytest.mark.skipif(not landlock_available(), reason="kernel has no Landlock")


@needs_landlock
@pytest.mark.parametrize("agent", ["Explore", "Plan"])
def test_read_only_agent_cannot_write_even_through_bash(
    api_server: MessagesServer, tmp_path: Path, agent: str
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("print('keep me')\n")
    api_server.handler = child_runs(agent, "touch x; rm -rf src; cat src/main.py")
    done = run_cli(["run", "go"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Permission denied" in done.stdout
    assert "keep me" in done.stdout
    assert (tmp_path / "src" / "main.py").exists()
    assert not (tmp_path / "x").exists()


@needs_landlock
def test_writing_agent_writes_only_inside_the_workspace(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outside = tmp_path / "outside.txt"
    api_server.handler = child_runs(
        "general-purpose", f"echo in > inside.txt; echo out > {outside}; echo tmp > $TMPDIR/t"
    )
    done = run_cli(["run", "go"], cli_env(api_server), cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert (workspace / "inside.txt").read_text() == "in\n"
    assert not outside.exists()
    assert "Permission denied" in done.stdout


def test_sandbox_off_lets_a_read_only_agent_write(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = child_runs("Explore", "touch x")
    done = run_cli(["run", "go", "--sandbox", "off"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "x").exists()


@pytest.mark.parametrize("options", [[], ["--child-network", "off"]], ids=["default", "off"])
def test_a_child_without_network_cannot_reach_a_server_on_the_host(
    api_server: MessagesServer, tmp_path: Path, options: list[str]
) -> None:
    probe = (
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
        f"{api_server.base_url.rsplit(':', 1)[1]}), timeout=2); print('REACHED')\" 2>&1 | tail -1"
    )
    api_server.handler = child_runs("Explore", probe)
    done = run_cli(["run", "go", *options], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "REACHED" not in done.stdout  # what it read could have gone out this way
    assert "Error" in done.stdout  # ConnectionRefusedError / OSError: Network is unreachable


def test_memory_hog_in_child_bash_fails_and_the_run_goes_on(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    hog = "python3 -c 'bytearray(3 * 1024**3)' 2>&1 | tail -1; echo survived"
    api_server.handler = child_runs("Explore", hog)
    done = run_cli(["run", "go", "--memory-mb", "1024"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "MemoryError" in done.stdout and "survived" in done.stdout


def test_isoagent_started_from_a_child_refuses_to_nest(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = child_runs("Explore", f"{sys.executable} -m isoagent run hi; echo rc=$?")
    done = run_cli(["run", "go"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "nesting depth" in done.stdout and "rc=1" in done.stdout


EXPLORE, GENERAL = BUILTIN_AGENTS["Explore"], BUILTIN_AGENTS["general-purpose"]


@pytest.mark.parametrize(
    ("agent", "choice", "allow", "landlock", "expected"),
    [
        (EXPLORE, "auto", False, True, "read-only"),
        (GENERAL, "auto", False, True, "workspace"),
        (EXPLORE, "workspace", False, True, "workspace"),
        (GENERAL, "off", False, True, "off"),
        (GENERAL, "auto", False, False, "off"),  # a writer may run unconfined (warned once)
        (EXPLORE, "auto", True, False, "off"),  # --allow-unsandboxed
    ],
)
def test_sandbox_mode_per_agent(agent, choice, allow, landlock, expected) -> None:
    assert sandbox_mode(agent, choice, allow, landlock) == expected


@pytest.mark.parametrize("choice", ["auto", "read-only"])
def test_read_only_agent_is_refused_without_landlock(choice) -> None:
    with pytest.raises(SandboxRefused, match="--allow-unsandboxed"):
        sandbox_mode(EXPLORE, choice, False, landlock=False)
