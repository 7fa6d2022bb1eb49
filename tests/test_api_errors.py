"""Each way a run fails raises its own ``IsoagentError`` class (its ``result`` the
``Result``, which says the same as data), against the test Messages server through the
real ``anthropic`` client and real child processes; and what the run cost."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

import isoagent
from isoagent.errors import STATUS_ERRORS
from isoagent.parent.cli.exit_codes import ExitCode, exit_code_for
from isoagent.parent.model.aliases import CURRENT_MODELS
from isoagent.parent.model.prices import cost_usd
from isoagent.protocol import Usage
from tests.support.api_env import use_server
from tests.support.messages_server import (
    MessagesServer,
    Reply,
    Request,
    error_reply,
    text_reply,
    tool_reply,
)
from tests.support.processes import wait_for

REPO = Path(__file__).parents[1]


@pytest.fixture
def env(api_server: MessagesServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_server(monkeypatch, api_server, tmp_path / "home")


def always_a_tool(req: Request) -> Reply:
    return tool_reply("Bash", {"command": "true"})


def failure(prompt: str = "go", **options: object) -> isoagent.IsoagentError:
    with pytest.raises(isoagent.IsoagentError) as raised:
        isoagent.task(prompt, **options)  # type: ignore[arg-type]
    return raised.value


@pytest.mark.usefixtures("env")
def test_a_rejected_key_is_an_authentication_error(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler = lambda req: error_reply(401, "authentication_error", "invalid x-api-key")
    error = failure(workdir=workspace)
    assert type(error) is isoagent.AuthenticationError
    assert error.result is not None and error.result.status == "error"
    assert error.result.api_error is not None and error.result.api_error.status_code == 401
    assert "rejected the credentials" in str(error)


def test_no_key_at_all_is_an_authentication_error_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, workspace: Path
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    error = failure(workdir=workspace)
    assert type(error) is isoagent.AuthenticationError and error.result is None


@pytest.mark.usefixtures("env")
def test_a_model_the_api_does_not_have_is_model_not_found(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler = lambda req: error_reply(404, "not_found_error", f"model: {req.model}")
    error = failure(workdir=workspace, model="claude-nope-1")
    assert type(error) is isoagent.ModelNotFoundError
    assert "model: claude-nope-1" in str(error)


@pytest.mark.usefixtures("env")
def test_a_refused_connection_is_a_connection_error(
    monkeypatch: pytest.MonkeyPatch, workspace: Path
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", MessagesServer.connections_refused_url())
    error = failure(workdir=workspace, api_retry_deadline=1)
    assert type(error) is isoagent.APIConnectionError


@pytest.mark.usefixtures("env")
def test_a_rate_limit_held_past_the_deadline_is_a_rate_limit_error(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler = lambda req: error_reply(429, "rate_limit_error", "slow down")
    error = failure(workdir=workspace, api_retry_deadline=1)
    assert type(error) is isoagent.RateLimitError
    assert error.result is not None and error.result.api_error is not None
    assert error.result.api_error.kind == "rate_limit"


@pytest.mark.usefixtures("env")
def test_a_spent_token_budget_is_a_budget_error(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler = always_a_tool
    error = failure(workdir=workspace, max_tokens_total=1)
    assert type(error) is isoagent.BudgetExceededError
    assert error.result is not None and error.result.status == "budget"


@pytest.mark.usefixtures("env")
def test_the_turn_limit_is_a_turn_limit_error_with_what_it_had(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler = always_a_tool
    error = failure(workdir=workspace, max_turns=2)
    assert type(error) is isoagent.TurnLimitError
    assert error.result is not None and error.result.turns == 2


@pytest.mark.usefixtures("env")
def test_a_child_past_its_timeout_is_a_child_timeout_error(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler = lambda req: tool_reply("Bash", {"command": "sleep 60"})
    error = failure(workdir=workspace, timeout=1)
    assert type(error) is isoagent.ChildTimeoutError
    assert isinstance(error, isoagent.ChildCrashedError)


@pytest.mark.usefixtures("env")
def test_a_crashed_child_is_a_child_crashed_error(
    monkeypatch: pytest.MonkeyPatch, workspace: Path, tmp_path: Path
) -> None:
    command = f"{sys.executable} -m tests.support.faulty_children truncated {tmp_path}"
    monkeypatch.setenv("ISOAGENT_CHILD_COMMAND", command)
    monkeypatch.setenv("ISOAGENT_FORK_SERVER", "0")
    monkeypatch.chdir(REPO)
    error = failure(workdir=workspace)
    assert type(error) is isoagent.ChildCrashedError
    assert error.result is not None and error.result.status == "crashed"


@pytest.mark.usefixtures("env")
def test_an_interrupted_task_is_a_run_interrupted_error(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler = lambda req: tool_reply("Bash", {"command": "touch started; sleep 60"})

    async def interrupted() -> isoagent.Result:
        async with isoagent.Session(workdir=workspace) as session:
            running = asyncio.ensure_future(session.task("go"))
            started = workspace / "started"
            assert await asyncio.to_thread(wait_for, started.exists, 60)
            session.interrupt()
            return await running

    with pytest.raises(isoagent.RunInterruptedError) as raised:
        asyncio.run(interrupted())
    assert raised.value.result is not None and raised.value.result.status == "cancelled"


def test_each_class_is_the_clis_exit_code_for_the_same_end() -> None:
    for status, error in STATUS_ERRORS.items():
        assert exit_code_for(status) == error.exit_code  # type: ignore[arg-type]
    assert isoagent.OptionError.exit_code == ExitCode.USAGE
    assert isoagent.AuthenticationError.exit_code == ExitCode.ERROR


@pytest.mark.usefixtures("env")
def test_a_result_says_what_the_run_and_each_child_cost(
    api_server: MessagesServer, workspace: Path
) -> None:
    def handler(req: Request) -> Reply:
        if req.is_parent and req.turn == 0:
            return tool_reply(
                "Agent", {"description": "d", "prompt": "p", "subagent_type": "Explore"}
            )
        return text_reply("done", usage=(1000, 100))

    api_server.handler = handler
    result = isoagent.run("go", workdir=workspace, model="sonnet")
    [child] = result.children
    sonnet = CURRENT_MODELS["sonnet"]  # Explore's model is the parent's
    assert result.children_cost_usd == {child.child: cost_usd(sonnet, Usage(1000, 100))}
    parent = cost_usd(sonnet, Usage(10, 5) + Usage(1000, 100))
    assert result.cost_usd == pytest.approx(parent + result.children_cost_usd[child.child])
    assert result.cost_usd > 0
