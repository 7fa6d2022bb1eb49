"""What a writing child plants is moved out without following any link it made, and before
any of the user's hooks runs.

A child may swap a workspace folder for a link to the home while the parent looks: the
parent must not list or move what is there (``~/.claude``, ``~/.vscode``, another
project's ``.git``). And a hook runs while a child works: a ``.git`` it planted, with a
``core.fsmonitor``, would run in the hook's ``git status``, unconfined.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from isoagent.parent.children.planted import INLINE_FOLDERS, PlantedNames
from isoagent.parent.records import beneath
from isoagent.parent.records.run_folder import RunFolder
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.test_security_sandbox import run_planting


def fake_home(root: Path) -> Path:
    """A home with what a swapped folder would lead the mover to: the user's own."""
    home = root / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text("{}")
    (home / ".vscode").mkdir()
    (home / "project" / ".git").mkdir(parents=True)
    (home / "project" / ".git" / "config").write_text("[core]\n")
    return home


def untouched(home: Path) -> bool:
    return all(
        (home / name).exists()
        for name in (".claude/settings.json", ".vscode", "project/.git/config")
    )


def test_a_folder_a_child_swaps_for_a_link_to_the_home_is_not_followed(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    home, workspace = fake_home(tmp_path), tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "kept.txt").write_text("x")
    swap = f"mv sub sub.old && ln -s {home} sub && mkdir -p sub.old/.claude; echo DONE"
    done = run_planting(api_server, workspace, swap, HOME=str(home))
    assert untouched(home), done.stderr
    assert str(home) not in done.stderr
    assert "a child created" in done.stderr and "sub.old/.claude" in done.stderr  # its own
    assert not (workspace / "sub.old" / ".claude").exists()


@pytest.fixture(params=["openat2", "a folder at a time"])
def openat2(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Both ways of opening beneath a folder: the kernel's, and the fallback without it."""
    monkeypatch.setattr(beneath, "_openat2", request.param == "openat2")
    yield


@pytest.fixture(params=["same file system", "another file system"])
def runs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """Where the run folder is: beside the workspace (a rename), or on /dev/shm's tmpfs
    (a copy through descriptors)."""
    if request.param == "same file system":
        yield tmp_path / "runs"
        return
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm for a run folder on another file system")
    elsewhere = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        yield elsewhere / "runs"
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)


@pytest.mark.usefixtures("openat2")
def test_the_mover_follows_no_link_a_child_made_at_any_step(tmp_path: Path, runs: Path) -> None:
    """Links at each place the mover looks: a folder it knew, a folder new since, a name
    it moves (a ``.git`` link is moved as the link, its target left)."""
    home, workspace = fake_home(tmp_path), tmp_path / "ws"
    for folder in ("known/deep", "other"):
        (workspace / folder).mkdir(parents=True)
    run = RunFolder.create(runs)
    planted = PlantedNames([workspace], run)
    planted.snapshot()
    (workspace / "known" / "deep").rename(workspace / "moved-away")
    (workspace / "known" / "deep").symlink_to(home)  # a folder it knew, now a link
    (workspace / "fresh").symlink_to(home / "project")  # a new name, a link
    (workspace / "other" / ".git").symlink_to(home / "project" / ".git")  # a planted link
    (workspace / "moved-away" / ".vscode").mkdir()  # planted for real
    (workspace / "moved-away" / ".vscode" / "tasks.json").write_text("{}")
    moved = planted.take("child-001")
    run.close()
    assert untouched(home)
    assert sorted(str(was.relative_to(workspace)) for was, _ in moved) == [
        "moved-away/.vscode",
        "other/.git",
    ]
    assert all(now is not None for _, now in moved)
    kept = runs / run.run_id / "planted" / "child-001" / "0-ws"
    assert (kept / "moved-away" / ".vscode" / "tasks.json").read_text() == "{}"
    assert (kept / "other" / ".git").is_symlink()  # the link itself, not its target
    assert not (workspace / "other" / ".git").exists()


@pytest.mark.parametrize("folders", [INLINE_FOLDERS - 2, INLINE_FOLDERS + 10])
def test_a_workspace_too_big_for_the_event_loop_is_walked_whole_in_a_thread(
    tmp_path: Path, folders: int
) -> None:
    """A small workspace is walked on the event loop (no thread to start); one of more
    folders is left unwalked there, nothing of it kept, and walked whole after: either way
    the ``.git`` a nested repository has is known, so a writing child gets it read-only."""
    workspace = tmp_path / "ws"
    for n in range(folders - 3):  # with ws, deep/ and deep/repo
        (workspace / f"folder-{n}").mkdir(parents=True)
    (workspace / "deep" / "repo" / ".git").mkdir(parents=True)
    run = RunFolder.create(tmp_path / "runs")
    planted = PlantedNames([workspace], run)
    small = planted.snapshot(INLINE_FOLDERS)
    assert small == (folders <= INLINE_FOLDERS)
    assert planted.taken == small and bool(planted.known) == small
    if not small:
        assert planted.snapshot()
    run.close()
    assert planted.nested([".git"]) == (str(workspace / "deep" / "repo" / ".git"),)
    assert not planted.partial


# ``--settings``: a PostToolUse hook that runs ``git status`` in the workspace
GIT_STATUS_HOOK = json.dumps(
    {
        "hooks": {
            "PostToolUse": [
                {"matcher": "", "hooks": [{"type": "command", "command": "git status; true"}]}
            ]
        }
    }
)


def test_a_hook_runs_no_fsmonitor_a_child_planted_while_it_works(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """The child plants a repository with an fsmonitor, then makes another tool call: the
    PostToolUse hook of each runs ``git status`` unconfined, while the child still works."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    marker = tmp_path / "PWNED"
    plant = (
        f"git init -q . && echo x > a && git add a && "
        f"git config core.fsmonitor 'touch {marker}'; echo DONE"
    )

    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn == 0:
                task = {"description": "d", "prompt": "p", "subagent_type": "general-purpose"}
                return tool_reply("Agent", task)
            return text_reply("parent done")
        if req.turn == 0:
            return tool_reply("Bash", {"command": plant})
        if req.turn == 1:
            return tool_reply("Bash", {"command": "echo still working"})
        return text_reply("child done")

    api_server.handler = handler
    args = ["-p", "go", "--settings", GIT_STATUS_HOOK]
    done = run_cli(args, cli_env(api_server), cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), "a hook ran the child's fsmonitor"
    assert "a child created" in done.stderr and "planted/hook-" in done.stderr
    assert not (workspace / ".git").exists()
