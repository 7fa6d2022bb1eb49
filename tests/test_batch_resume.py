"""``isoagent batch`` resumes by content, not by the file's identity: a line is trusted when
isoagent signed it (the signature goes with the file) and its task is the same; ``-o`` is
opened without following a link a child could plant."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import cli_env
from tests.support.cli import read_jsonl, run_cli
from tests.support.messages_server import MessagesServer, Request, text_reply


def _tasks(path: Path, prompts: dict[str, str]) -> Path:
    lines = [{"id": task, "prompt": prompt} for task, prompt in prompts.items()]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _answer(request: Request) -> object:
    return text_reply(f"did: {request.first_user_text}")


def _env(api_server: MessagesServer, tmp_path: Path) -> dict[str, str]:
    return cli_env(api_server, HOME=str(tmp_path / "home"))


def test_a_batch_copied_with_its_output_elsewhere_resumes_there_running_nothing(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """30 tasks done in one folder, the folder copied to another and the batch run there:
    the lines were trusted by a ledger kept for the file's path, so all 30 ran (and were
    paid) again and the file got a second line for each id."""
    api_server.handler = _answer
    first = tmp_path / "first"
    first.mkdir()
    _tasks(first / "tasks.jsonl", {f"t{n}": f"task {n}" for n in range(30)})
    args = ["batch", "tasks.jsonl", "-j", "8", "-o", "out.jsonl"]
    done = run_cli(args, _env(api_server, tmp_path), cwd=first)
    assert done.returncode == 0, done.stderr
    asked = len(api_server.requests)

    moved = tmp_path / "moved"
    shutil.copytree(first, moved)
    shutil.rmtree(moved / ".isoagent")  # nothing of the first folder's run base comes along
    again = run_cli([*args, "-C", str(moved)], _env(api_server, tmp_path), cwd=moved)
    assert again.returncode == 0, again.stderr
    assert "skipping 30 tasks already done" in again.stderr
    assert len(api_server.requests) == asked
    lines = read_jsonl(moved / "out.jsonl")
    assert len(lines) == 30 and len({line["id"] for line in lines}) == 30


def test_a_changed_prompt_under_an_old_id_is_said_and_not_run(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """Task "a" done with one prompt, then the input gives "a" another: it was skipped
    without a word. It is refused by name (its id keeps its one line), the rest runs."""
    api_server.handler = _answer
    args = ["batch", "tasks.jsonl", "-o", "out.jsonl", "-C", str(workspace)]
    _tasks(tmp_path / "tasks.jsonl", {"a": "first prompt"})
    assert run_cli(args, _env(api_server, tmp_path), cwd=tmp_path).returncode == 0
    _tasks(tmp_path / "tasks.jsonl", {"a": "another prompt", "b": "new task"})
    done = run_cli(args, _env(api_server, tmp_path), cwd=tmp_path)
    assert done.returncode == 6, done.stderr
    assert "id 'a' has a result in out.jsonl for another prompt or agent: not run" in done.stderr
    assert "another prompt" not in {r.first_user_text for r in api_server.requests}
    lines = read_jsonl(tmp_path / "out.jsonl")
    assert [(line["id"], line["summary"]) for line in lines] == [
        ("a", "did: first prompt"),
        ("b", "did: new task"),
    ]


def test_a_line_isoagent_did_not_sign_runs_again_unless_adopted(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = _answer
    args = ["batch", "tasks.jsonl", "-o", "out.jsonl", "-C", str(workspace)]
    _tasks(tmp_path / "tasks.jsonl", {"a": "a prompt"})
    line = {"id": "a", "status": "ok", "line": 1, "summary": "from elsewhere"}
    (tmp_path / "out.jsonl").write_text(json.dumps(line) + "\n")
    adopted = run_cli([*args, "--adopt"], _env(api_server, tmp_path), cwd=tmp_path)
    assert adopted.returncode == 0, adopted.stderr
    assert api_server.requests == []
    done = run_cli(args, _env(api_server, tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "1 ok line in out.jsonl not signed by isoagent batch" in done.stderr
    assert [r.first_user_text for r in api_server.requests] == ["a prompt"]


def test_the_resume_does_not_append_through_a_link_a_child_planted(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """As a writing child leaves the workspace: it renamed results/, made a new one and
    planted out.jsonl -> ~/.bash_aliases; the documented resume appended its result lines
    there, and a summary's $(...) ran when the file was sourced."""
    api_server.handler = _answer
    args = ["batch", "tasks.jsonl", "-o", "results/out.jsonl"]
    _tasks(workspace / "tasks.jsonl", {"a": "one", "b": "two"})
    (workspace / "results").mkdir()
    env = _env(api_server, tmp_path)
    assert run_cli(args, env, cwd=workspace).returncode == 0
    aliases = tmp_path / "home" / ".bash_aliases"
    aliases.parent.mkdir(exist_ok=True)
    aliases.write_text("alias ll='ls -l'\n")
    (workspace / "results").rename(workspace / "results.old")
    (workspace / "results").mkdir()
    (workspace / "results" / "out.jsonl").symlink_to(aliases)
    _tasks(workspace / "tasks.jsonl", {"a": "one", "b": "two", "c": "$(touch pwned)"})

    done = run_cli(args, env, cwd=workspace)
    assert done.returncode == 2, done.stderr
    assert "goes through a symbolic link" in done.stderr
    assert aliases.read_text() == "alias ll='ls -l'\n"
    (workspace / "results").rename(workspace / "results.planted")
    (workspace / "results.planted" / "out.jsonl").unlink()
    (workspace / "results").symlink_to(workspace / "results.planted")  # a linked folder too
    done = run_cli(args, env, cwd=workspace)
    assert done.returncode == 2, done.stderr
    assert not (workspace / "results.planted" / "out.jsonl").exists()
