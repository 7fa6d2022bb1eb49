"""``isoagent task``: one child process, no parent turn, piped stdin, exit codes."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from isoagent.parent.cli.main import cli
from tests.conftest import cli_env
from tests.support.cli import run_cli, shell
from tests.support.messages_server import (
    MessagesServer,
    Reply,
    Request,
    error_reply,
    text_reply,
    tool_reply,
)

# each command runs in-process, then through the warm daemon: the same output and exit codes
pytestmark = pytest.mark.usefixtures("both_paths")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "notes.txt").write_text("the answer is 42\n")
    return path


def env_for(server: MessagesServer, tmp_path: Path) -> dict[str, str]:
    return cli_env(server, HOME=str(tmp_path / "home"))


def test_task_runs_one_child_and_prints_its_summary(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("Read", {"file_path": "notes.txt"})
        return text_reply("Found: " + req.tool_results[0]["content"].strip())

    api_server.handler = handler
    done = run_cli(
        ["task", "--agent", "Explore", "what is the answer?", "-C", str(workspace)],
        env_for(api_server, tmp_path),
        cwd=tmp_path,
        input="",
    )
    assert done.returncode == 0, done.stderr
    assert "Found:" in done.stdout and "42" in done.stdout
    assert not any(r.is_parent for r in api_server.requests)  # no parent model turn
    assert [r.turn for r in api_server.requests] == [0, 1]
    assert api_server.requests[0].first_user_text == "what is the answer?"
    assert "file search specialist" in api_server.requests[0].system  # the Explore agent


def test_piped_stdin_is_attached_to_the_prompt_as_a_delimited_block(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = lambda req: text_reply("PLAN: looks fine")
    done = shell(
        f"printf 'diff --git a/x b/x\\n+new line\\n' "
        f"| isoagent task --agent Plan 'review this diff' -C {shlex.quote(str(workspace))} "
        f"> {shlex.quote(str(tmp_path / 'plan.md'))}",
        env_for(api_server, tmp_path),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "plan.md").read_text() == "PLAN: looks fine\n"
    prompt = api_server.requests[0].first_user_text
    assert prompt == "review this diff\n\n<stdin>\ndiff --git a/x b/x\n+new line\n</stdin>"


def test_dash_reads_the_prompt_from_stdin_in_a_pipeline(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = lambda req: text_reply(f"echo: {req.first_user_text.strip()}")
    (tmp_path / "prompt.txt").write_text("count the files\n")
    done = shell(
        f"isoagent task - -C {shlex.quote(str(workspace))} < prompt.txt | tr a-z A-Z",
        env_for(api_server, tmp_path),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ECHO: COUNT THE FILES\n"
    assert api_server.requests[0].first_user_text == "count the files\n"


def test_turn_limit_exits_3(api_server: MessagesServer, tmp_path: Path, workspace: Path) -> None:
    api_server.handler = lambda req: tool_reply("Bash", {"command": "true"})
    done = run_cli(
        ["task", "loop forever", "--max-turns", "2", "-C", str(workspace)],
        env_for(api_server, tmp_path),
        cwd=tmp_path,
        input="",
    )
    assert done.returncode == 3, done.stderr
    assert "isoagent: max_turns" in done.stderr
    assert len(api_server.requests) == 2


def test_child_timeout_exits_4(api_server: MessagesServer, tmp_path: Path, workspace: Path) -> None:
    api_server.handler = lambda req: tool_reply("Bash", {"command": "sleep 30"})
    done = run_cli(
        ["task", "hang", "--timeout", "1", "-C", str(workspace)],
        env_for(api_server, tmp_path),
        cwd=tmp_path,
        input="",
    )
    assert done.returncode == 4, done.stderr
    assert "isoagent: timeout: child timed out" in done.stderr
    assert "Traceback" not in done.stderr


def test_api_error_exits_1(api_server: MessagesServer, tmp_path: Path, workspace: Path) -> None:
    api_server.handler = lambda req: error_reply(400, "invalid_request_error", "bad model")
    done = run_cli(
        ["task", "hi", "-C", str(workspace)], env_for(api_server, tmp_path), cwd=tmp_path, input=""
    )
    assert done.returncode == 1, done.stderr
    assert "bad model" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["task", "hi", "--agent", "Nope"], "unknown agent 'Nope'; choose one of: Explore"),
        (["task", "   "], "the prompt is empty"),
        (["task"], "Missing argument 'PROMPT'"),
    ],
)
def test_usage_errors_exit_2_before_any_model_call(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, args: list[str], message: str
) -> None:
    done = run_cli(
        [*args, "-C", str(workspace)], env_for(api_server, tmp_path), cwd=tmp_path, input=""
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stderr.startswith("isoagent: ") and "Traceback" not in done.stderr
    assert api_server.requests == []


def test_help_documents_the_exit_codes_and_stdin() -> None:
    result = CliRunner().invoke(cli, ["task", "--help"], terminal_width=100)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "Exit codes: 0 ok, 1 error" in text
    assert "2 usage, 3 turn limit, 4 child failed" in text
    assert "<stdin>" in text
    assert "git diff | isoagent task --agent Plan" in result.output
    assert "--output-format [text|json|stream-json]" in result.output
