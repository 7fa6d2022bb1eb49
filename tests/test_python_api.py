"""``import isoagent``: task/run and atask/arun, with the CLI's options and defaults."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import isoagent
from isoagent.parent.model.aliases import CURRENT_MODELS
from tests.conftest import shared_gateway
from tests.support.docs_examples import readme_example
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply


@pytest.fixture
def server(api_server: MessagesServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    for name in ("ANTHROPIC_MODEL", "ISOAGENT_MODEL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api_server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return api_server


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "app.py").write_text("def f(x):\n    return x / 0\n")
    return path


def reviewing(req: Request) -> Reply:
    if req.turn == 0:
        return tool_reply("Read", {"file_path": "app.py"})
    return text_reply(f"bug: division by zero | {','.join(req.tool_names)}")


def test_task_runs_one_subagent_and_returns_its_result(
    server: MessagesServer, workspace: Path
) -> None:
    server.handler = reviewing
    result = isoagent.task("review app.py", agent="Explore", workdir=workspace, model="haiku")
    assert result.result == "bug: division by zero | Bash,Read,Glob,Grep"
    assert (result.status, result.is_error, result.turns, result.tool_calls) == ("ok", False, 2, 1)
    assert result.usage.input_tokens == 20 and result.usage.output_tokens == 10
    assert result.transcript.is_file() and result.transcript.parent == result.run_dir
    assert uuid.UUID(result.session_id).version == 4  # a new session's id, as Claude Code's
    assert {r.model for r in server.requests} == {CURRENT_MODELS["haiku"]}
    events = [json.loads(line) for line in result.transcript.read_text().splitlines()]
    assert events[-1]["type"] == "child_result"


def test_run_runs_the_parent_and_resume_continues_it(
    server: MessagesServer, workspace: Path
) -> None:
    server.handler = lambda req: text_reply(f"{len(req.messages)} messages")
    first = isoagent.run("hello", workdir=workspace)
    assert first.result == "1 messages" and first.transcript.name == "run.jsonl"
    again = isoagent.run("more", workdir=workspace, resume=first.session_id)
    assert again.result == "3 messages"


def test_async_variants_run_concurrently_from_asyncio(
    server: MessagesServer, workspace: Path
) -> None:
    server.handler = lambda req: text_reply(req.first_user_text.upper())

    async def both() -> list[isoagent.Result]:
        return await asyncio.gather(
            isoagent.atask("one", workdir=workspace), isoagent.arun("two", workdir=workspace)
        )

    one, two = asyncio.run(both())
    assert (one.result, two.result) == ("ONE", "TWO")
    assert one.session_id != two.session_id


def test_options_are_the_clis_and_wrong_ones_fail_clearly(
    server: MessagesServer, workspace: Path
) -> None:
    with pytest.raises(TypeError, match="unknown option 'modle'"):
        isoagent.task("x", workdir=workspace, modle="haiku")
    with pytest.raises(isoagent.OptionError, match="max_turns=-1"):
        isoagent.task("x", workdir=workspace, max_turns=-1)
    with pytest.raises(isoagent.IsoagentError, match="unknown agent 'nope'"):
        isoagent.task("x", agent="nope", workdir=workspace)
    with pytest.raises(isoagent.IsoagentError, match="'Bsh'"):
        isoagent.run("x", workdir=workspace, disallowed_tools=["Bsh"])
    assert server.requests == []


def test_claude_code_options_shape_the_parent(server: MessagesServer, workspace: Path) -> None:
    server.handler = lambda req: text_reply(",".join(req.tool_names))
    result = isoagent.run(
        "x", workdir=workspace, allowed_tools=["Bash(git:*)"], permission_mode="default",
        system_prompt="Be brief.", agents={"rev": {"description": "d", "prompt": "p"}},
    )  # fmt: skip
    assert result.result == "Read,Glob,Grep,Bash,Agent,SendMessage"
    assert server.requests[0].system == "Be brief."
    assert "- rev: d" in json.dumps(server.requests[0].body["tools"])


def test_the_readmes_click_command_delegates_to_a_subagent(
    server: MessagesServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.handler = reviewing
    namespace: dict[str, Any] = {}
    exec(compile(readme_example("review"), "python-api.md", "exec"), namespace)
    monkeypatch.chdir(workspace)
    outcome = CliRunner().invoke(namespace["review"], ["app.py"])
    assert outcome.exit_code == 0, outcome.output
    assert outcome.output.startswith("bug: division by zero")
    assert server.requests[0].first_user_text == "Review app.py for bugs; list them."

    server.handler = lambda req: Reply(status=401, error_type="authentication_error",
                                       error_message="invalid x-api-key")  # fmt: skip
    failed = CliRunner().invoke(namespace["review"], ["app.py"])
    assert failed.exit_code == 1
    assert failed.stderr.startswith("review: error: ")
    assert "rejected the credentials" in failed.stderr


def test_importing_isoagent_imports_nothing_else() -> None:
    """A child imports the package root first: it must stay cheap."""
    probe = (
        "import sys; before = set(sys.modules); import isoagent; "
        "print(sorted(m for m in set(sys.modules) - before if 'editable' not in m))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "['isoagent']", done.stderr


def test_a_misspelt_option_is_a_type_error_naming_it_before_anything_starts(
    server: MessagesServer, workspace: Path
) -> None:
    with pytest.raises(TypeError, match="max_turn"):
        isoagent.Options(max_turn=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unknown option 'max_turn'"):
        isoagent.task("x", options=isoagent.Options(workdir=workspace), max_turn=2)
    assert server.requests == []


def test_an_agent_definition_in_options_is_an_agent_a_task_can_name(
    server: MessagesServer, workspace: Path
) -> None:
    server.handler = reviewing
    reviewer = isoagent.AgentDefinition(
        description="Reviews code", prompt="You review code.", tools=["Read"], model="haiku"
    )
    options = isoagent.Options(workdir=workspace, agents={"rev": reviewer})
    result = isoagent.task("review app.py", agent="rev", options=options)
    assert result.result == "bug: division by zero | Read"

    assert server.requests[0].system.startswith("You review code.")
    assert {r.model for r in server.requests} == {CURRENT_MODELS["haiku"]}


def test_the_api_runs_without_importing_click(server: MessagesServer, workspace: Path) -> None:
    """The library is the core: a script that calls it never loads the CLI."""
    server.handler = lambda req: text_reply("done")
    script = (
        "import sys, isoagent\n"
        "options = isoagent.Options(workdir=sys.argv[1])\n"
        "print(isoagent.task('x', options=options).result, isoagent.run('y', options=options)"
        ".result)\n"
        "print(sorted(m for m in sys.modules if m == 'click' or m.startswith(("
        "'click.', 'isoagent.parent.cli'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(workspace)],
        env=shared_gateway(dict(os.environ)),  # not an import of the SDK of its own
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["done done", "[]"]


def test_dir_and_help_show_the_api() -> None:
    import pydoc

    public = {"task", "run", "atask", "arun", "batch", "abatch", "Session", "Options", "Result"}
    public |= {"AgentDefinition", "TaskRecord", "read_tasks"}
    errors = {name for name in isoagent.__all__ if name.endswith("Error")}
    assert public | errors == set(isoagent.__all__)
    assert {"IsoagentError", "OptionError", "AuthenticationError", "TurnLimitError"} <= errors
    assert set(isoagent.__all__) <= set(dir(isoagent))
    for name in errors:
        assert issubclass(getattr(isoagent, name), isoagent.IsoagentError)
    text = pydoc.render_doc(isoagent)
    assert "isoagent.Options" in text and "KeyboardInterrupt" in text
    assert all(getattr(isoagent, name).__doc__ for name in isoagent.__all__)


def test_a_session_runs_several_tasks_over_one_run_folder_and_gateway(
    server: MessagesServer, workspace: Path
) -> None:
    server.handler = lambda req: text_reply(req.first_user_text.upper())

    async def three() -> tuple[isoagent.Session, list[isoagent.Result]]:
        async with isoagent.Session(workdir=workspace) as session:
            asked = [session.task(prompt) for prompt in ("a", "b", "c")]
            return session, list(await asyncio.gather(*asked))

    session, results = asyncio.run(three())
    assert [r.result for r in results] == ["A", "B", "C"]
    assert {r.run_dir for r in results} == {session.run_dir}
    assert {r.session_id for r in results} == {session.session_id}
    assert len({r.transcript for r in results}) == 3
    assert [r.cost_usd > 0 for r in results] == [True] * 3
    final = json.loads((session.run_dir / "run.jsonl").read_text().splitlines()[-1])
    assert final["result"]["summary"] == "3 of 3 tasks ok"
    assert final["result"]["usage"]["input_tokens"] == 30  # one gateway counted all three
