"""A child is untrusted: the parent answers only the model calls its Task allows.

Each test starts a child that forges ``ModelCall`` frames (tests/support/faulty_children)
and checks that the forged call never reached the API, that the child was told why, and
that the task failed with a line that says so.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer

REFUSED = "isoagent: error: child sent a model call its Task does not allow: "


def forging_child(behaviour: str, folder: Path) -> str:
    return f"{sys.executable} -m tests.support.faulty_children {behaviour} {folder}"


def run_forging(
    server: MessagesServer, folder: Path, behaviour: str, *args: str
) -> tuple[str, list[str]]:
    env = cli_env(server, ISOAGENT_CHILD_COMMAND=forging_child(behaviour, folder))
    done = run_cli(["task", *args, "go"], env, cwd=folder, timeout=60)
    assert done.returncode != 0, done.stderr
    assert "Traceback" not in done.stderr
    replies = (folder / "replies").read_text().splitlines()
    assert replies[-1].startswith("refused by the parent: "), replies
    return done.stderr, replies


@pytest.mark.parametrize(
    ("behaviour", "why"),
    [
        ("forge-model", "model 'claude-opus-4-1-expensive' is not its Task's"),
        ("forge-tokens", "max_tokens 1638400 is above its Task's 16384"),
        ("forge-tools", "server tool 'web_fetch' (web_fetch_20250910, max_uses unlimited)"),
        ("forge-options", "request options (thinking, betas) are the parent's alone"),
    ],
)
def test_child_cannot_ask_for_more_than_its_task_gave(
    api_server: MessagesServer, tmp_path: Path, behaviour: str, why: str
) -> None:
    stderr, replies = run_forging(api_server, tmp_path, behaviour)

    assert REFUSED + why in stderr
    assert replies == [f"refused by the parent: {why}" + replies[0].split(why, 1)[1]]
    assert api_server.requests == []  # the forged call never reached the API


def test_child_cannot_take_more_turns_than_its_task_allows(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    stderr, replies = run_forging(api_server, tmp_path, "forge-turns", "--max-turns", "3")

    assert REFUSED + "model call 4 is past its Task's turn limit (3)" in stderr
    assert replies[:3] == ["ok", "ok", "ok"] and len(replies) == 4
    assert len(api_server.requests) == 3


def test_server_tool_its_agent_was_given_reaches_the_api(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "searcher.md").write_text(
        "---\nname: searcher\ndescription: searches\ntools: WebSearch, Read\n---\nSearch.\n"
    )
    done = run_cli(["task", "--agent", "searcher", "go"], cli_env(api_server), cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "web_search" in api_server.requests[0].tool_names
