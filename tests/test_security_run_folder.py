"""The run folder is out of a child's reach: the parent never writes through what a child planted.

A writing child's bash plants symbolic links where the parent will write next (the
next child's transcript and log, its own run folder, ``.isoagent/runs``), aiming
them outside the workspace. Sandboxed, ``.isoagent`` is read-only inside the child;
with ``--sandbox off`` the parent's own care (files created new in a folder held
open since its creation, folders opened without following links) must hold alone.
"""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support.cli import run_cli, run_dirs
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.support.scripts import child_runs
from tests.test_security_sandbox import needs_landlock, needs_mounts

SANDBOXES = [pytest.param([], id="sandboxed"), pytest.param(["--sandbox", "off"], id="sandbox-off")]


def two_children(first_command: str):
    """The parent starts a writing child that runs ``first_command``, then a second one."""

    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn < 2:
                args = {"description": f"step {req.turn}", "prompt": "go"}
                return tool_reply("Agent", {**args, "subagent_type": "general-purpose"})
            return text_reply("PARENT DONE")
        if req.turn == 0 and req.first_user_text == "go" and not req.tool_results:
            return tool_reply("Bash", {"command": first_command})
        return text_reply("CHILD DONE: " + str(req.tool_results[0]["content"]))

    return handler


@pytest.mark.parametrize("options", SANDBOXES)
def test_links_planted_for_the_next_childs_files_are_not_followed(
    api_server: MessagesServer, tmp_path: Path, options: list[str]
) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    plant = (
        "d=$(ls -d .isoagent/runs/*/ | tail -1); for n in 001 002; do "
        f"ln -s {outside}/$n.log $d/child-$n-general-purpose.stderr.log; "
        f"ln -s {outside}/$n.jsonl $d/child-$n-general-purpose.jsonl; done; "
        f"ln -s {outside}/run.jsonl $d/run.jsonl.new; mv -f $d/run.jsonl.new $d/run.jsonl; "
        "ls -l $d"
    )
    first = True

    def handler(req: Request) -> Reply:
        nonlocal first
        if not req.is_parent and req.turn == 0 and first:
            first = False
            return tool_reply("Bash", {"command": plant})
        return two_children(plant)(req) if req.is_parent else text_reply("CHILD DONE")

    api_server.handler = handler
    done = run_cli(["run", "go", *options], cli_env(api_server), cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert list(outside.iterdir()) == []  # nothing written through a planted link


@pytest.mark.parametrize("options", SANDBOXES)
def test_a_child_replacing_the_run_folders_with_links_sends_no_file_outside(
    api_server: MessagesServer, tmp_path: Path, options: list[str]
) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    swap = (
        "d=$(ls -d .isoagent/runs/*/ | tail -1); d=${d%/}; "
        f"mv $d $d.moved && ln -s {outside} $d; "
        f"mv .isoagent/runs .isoagent/moved && ln -s {outside} .isoagent/runs; ls -la .isoagent"
    )
    api_server.handler = two_children(swap)
    done = run_cli(["run", "go", *options], cli_env(api_server), cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert list(outside.iterdir()) == []
    # the next run does not follow .isoagent/runs either: it refuses, or finds it intact
    again = run_cli(["run", "go", *options], cli_env(api_server), cwd=workspace)
    assert list(outside.iterdir()) == []
    if again.returncode != 0:
        assert "symbolic link or not a folder" in again.stderr


def test_run_files_are_private_and_ignored_by_git(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    api_server.handler = child_runs("Explore", "echo hi")
    done = run_cli(["run", "go"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr

    (run,) = run_dirs(tmp_path)
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    files = list(run.iterdir())
    assert len(files) >= 2  # run.jsonl and the child's transcript (its log: see test_security_proc)
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert (tmp_path / ".isoagent" / ".gitignore").read_text() == "*\n"
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=tmp_path, capture_output=True, text=True
    )
    assert status.stdout == ""


@needs_landlock
@needs_mounts
@pytest.mark.parametrize("where", ["state-folder", "run-dir"])
def test_a_child_cannot_read_or_write_runs_kept_outside_the_workspace(
    api_server: MessagesServer, tmp_path: Path, where: str
) -> None:
    """Earlier runs in the user's state folder (a read-only workspace's) or in a
    ``--run-dir``: a writing child whose workspace holds them (the home) neither reads nor
    plants anything there."""
    home = tmp_path / "home"
    runs = home / ".local" / "state" / "isoagent" / "runs"
    if where == "run-dir":
        runs = home / "isoagent-runs"
    earlier = runs / "earlier"
    earlier.mkdir(parents=True)
    (earlier / "run.jsonl").write_text("SECRET-EARLIER-RUN")
    attack = f"cat {earlier}/run.jsonl; echo planted > {earlier}/planted; ls {runs}; echo TRIED"
    api_server.handler = child_runs("general-purpose", f"{attack} 2>&1")
    options = ["--run-dir", str(runs)] if where == "run-dir" else []
    env = cli_env(api_server, HOME=str(home))
    env.pop("XDG_STATE_HOME", None)
    done = run_cli(["run", "go", *options], env, cwd=home)
    assert done.returncode == 0, done.stderr
    assert "TRIED" in done.stdout
    assert "SECRET" not in done.stdout
    assert not (earlier / "planted").exists()


@pytest.mark.parametrize("options", SANDBOXES)
def test_a_link_planted_above_the_run_folders_in_the_workspace_is_not_followed(
    api_server: MessagesServer, tmp_path: Path, options: list[str]
) -> None:
    """The workspace is the home: a writing child swaps ``~/.local/state`` (above the state
    folder's ``isoagent/runs``) for a link; the next run whose runs go there refuses."""
    home, outside = tmp_path / "home", tmp_path / "outside"
    (home / ".local").mkdir(parents=True)
    outside.mkdir()
    plant = f"mv ~/.local/state ~/.local/moved; ln -s {outside} ~/.local/state && ls -l ~/.local"
    api_server.handler = child_runs("general-purpose", plant)
    env = cli_env(api_server, HOME=str(home))
    env.pop("XDG_STATE_HOME", None)
    done = run_cli(["run", "go", *options], env, cwd=home)
    assert done.returncode == 0, done.stderr
    assert (home / ".local" / "state").is_symlink()  # planted

    runs = home / ".local" / "state" / "isoagent" / "runs"
    again = run_cli(["run", "go", "--run-dir", str(runs), *options], env, cwd=home)
    assert again.returncode == 1
    assert again.stderr == (
        f"isoagent: cannot create the run folder in {runs}: "
        "state is a symbolic link or not a folder\n"
    )
    assert list(outside.iterdir()) == []
