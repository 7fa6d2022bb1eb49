"""Where run folders go: ``--run-dir`` or ``$ISOAGENT_RUN_DIR``; the workspace's
``.isoagent/runs``; the user's state folder when a read-only workspace cannot hold them.
``isoagent logs`` reads them where they went."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from isoagent.parent.records.run_folder import runs_dir_for
from tests.conftest import cli_env
from tests.support.cli import in_private_mounts, run_cli
from tests.support.messages_server import MessagesServer, text_reply
from tests.support.scripts import child_runs


@pytest.mark.parametrize("how", ["option", "variable"])
def test_the_run_dir_chosen_holds_the_runs_and_logs_reads_them_there(
    api_server: MessagesServer, tmp_path: Path, how: str
) -> None:
    ws, chosen = tmp_path / "ws", tmp_path / "chosen"
    ws.mkdir()
    api_server.handler = child_runs("Explore", "echo looked")
    flag, env = (
        (["--run-dir", str(chosen)], {})
        if how == "option"
        else ([], {"ISOAGENT_RUN_DIR": str(chosen)})
    )
    done = run_cli(["run", "go", *flag], cli_env(api_server, **env), cwd=ws)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr  # chosen: nothing to say

    (run,) = chosen.iterdir()
    assert (run / "run.jsonl").is_file()
    assert not (ws / ".isoagent").exists()
    listed = run_cli(["logs", *flag], cli_env(api_server, **env), cwd=ws)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(run.name)


def test_a_read_only_workspace_runs_a_read_only_agent_with_its_runs_in_the_state_folder(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """The workspace a read-only bind mount (as a read-only checkout or volume would be):
    the run goes to ~/.local/state/isoagent/runs, said once; ``logs`` finds it there; the
    child cannot see it."""
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    (ws / "notes.txt").write_text("PLAIN-NOTES")
    state = home / ".local" / "state" / "isoagent" / "runs"
    api_server.handler = child_runs("Explore", f"cat notes.txt; ls -a {state} 2>&1")
    out = tmp_path / "out"
    out.mkdir()
    script = f"""
        cd {ws} || exit 98
        isoagent run go >{out}/run.out 2>{out}/run.err; echo $? >{out}/run.rc
        isoagent logs >{out}/logs.out 2>{out}/logs.err; echo $? >{out}/logs.rc
    """
    env = cli_env(api_server, HOME=str(home))
    env.pop("XDG_STATE_HOME", None)
    mount = f"mount --bind {ws} {ws} && mount -o remount,bind,ro {ws}"
    done = in_private_mounts(mount, script, env, tmp_path)
    assert done.returncode == 0, done.stderr

    run_err = (out / "run.err").read_text()
    assert (out / "run.rc").read_text() == "0\n", run_err
    said = (
        f"isoagent: cannot create run folders in {ws}/.isoagent/runs: they go to {state} "
        "(--run-dir chooses where)\n"
    )
    assert run_err.startswith(said) and run_err.count("run folders") == 1  # said once
    answer = (out / "run.out").read_text()
    assert "PLAIN-NOTES" in answer  # the read-only agent ran in the read-only workspace
    # hidden from it: the whole state folder (the runs, the key that seals them) is covered
    assert "PLAIN-NOTESls: cannot access '" in answer  # (the answer cuts the path short)
    (run,) = state.iterdir()
    assert (run / "run.jsonl").is_file()
    assert not (ws / ".isoagent").exists()
    assert (out / "logs.rc").read_text() == "0\n", (out / "logs.err").read_text()
    assert (out / "logs.out").read_text().startswith(run.name)


def test_a_workspace_another_user_cannot_write_sends_that_users_runs_to_its_state_folder(
    tmp_path: Path,
) -> None:
    """As ``nobody`` (a forked process of this test that gives up root), a root-owned
    workspace is not writable: the run folders go to nobody's state folder; a folder
    nobody may write keeps them in the workspace."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    shared = Path(tempfile.mkdtemp(prefix="isoagent-run-dir-"))
    try:
        closed, open_ = shared / "closed", shared / "open"
        closed.mkdir(mode=0o755)
        open_.mkdir(mode=0o777)
        os.chmod(shared, 0o755)
        os.chmod(open_, 0o777)
        state = shared / "state"
        reading, writing = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the forked process
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                os.environ["XDG_STATE_HOME"] = str(state)
                answers = [runs_dir_for(place) for place in (closed, open_)]
                os.write(writing, repr([(str(p), moved) for p, moved in answers]).encode())
            finally:
                os._exit(0)
        os.close(writing)
        with os.fdopen(reading) as answer:
            said = answer.read()
        os.waitpid(pid, 0)
        assert said == repr(
            [(str(state / "isoagent" / "runs"), True), (str(open_ / ".isoagent" / "runs"), False)]
        )
    finally:
        shutil.rmtree(shared)


@pytest.mark.usefixtures("both_paths")  # the daemon's session finds it from the client's folder
def test_a_run_from_a_sub_folder_keeps_its_runs_with_the_projects(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """As git finds its repository: the nearest folder up with .git (or an .isoagent); its
    runs are found from any sub-folder (``--continue``, ``logs``); ``--run-dir`` overrides."""
    project = tmp_path / "project"
    src = project / "src" / "deep"
    src.mkdir(parents=True)
    (project / ".git").mkdir()
    api_server.handler = lambda req: text_reply(f"seen {len(req.messages)} messages")
    env = cli_env(api_server, HOME=str(tmp_path))
    assert run_cli(["-p", "one"], env, cwd=project, input="").returncode == 0
    continued = run_cli(["-p", "two", "--continue"], env, cwd=src, input="")
    assert continued.stdout == "seen 3 messages\n", continued.stderr
    assert not (project / "src" / ".isoagent").exists() and not (src / ".isoagent").exists()
    assert len(list((project / ".isoagent" / "runs").iterdir())) == 2
    listed = run_cli(["logs"], env, cwd=src)
    assert len(listed.stdout.splitlines()) == 2, listed.stderr

    chosen = tmp_path / "chosen"
    assert run_cli(["-p", "x", "--run-dir", str(chosen)], env, cwd=src, input="").returncode == 0
    assert len(list(chosen.iterdir())) == 1


def test_no_project_spans_the_home_a_shared_folder_or_another_users_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dotfiles ``~/.git``, an ``.isoagent`` a run once left in ``/tmp`` (a folder anyone may
    write), a ``.git`` another user made above the workspace: none gathers its runs."""
    home, scratch = tmp_path / "home", tmp_path / "home" / "scratch"
    scratch.mkdir(parents=True)
    (home / ".git").mkdir()
    monkeypatch.setenv("HOME", str(home))
    assert runs_dir_for(scratch) == (scratch / ".isoagent" / "runs", False)

    shared, ws = tmp_path / "shared", tmp_path / "shared" / "ws"
    ws.mkdir(parents=True)
    (shared / ".isoagent").mkdir()
    os.chmod(shared, 0o1777)
    assert runs_dir_for(ws) == (ws / ".isoagent" / "runs", False)
    os.chmod(shared, 0o755)
    assert runs_dir_for(ws) == (shared / ".isoagent" / "runs", False)  # a project's, now

    if os.geteuid() != 0:
        return  # giving a folder to another user needs root
    (shared / ".isoagent").rmdir()
    (shared / ".git").mkdir()
    os.chown(shared / ".git", 65534, 65534)
    assert runs_dir_for(ws) == (ws / ".isoagent" / "runs", False)
    os.chown(shared / ".git", 0, 0)
    assert runs_dir_for(ws) == (shared / ".isoagent" / "runs", False)
