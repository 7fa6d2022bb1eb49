"""A child's frames carry no authority it was not given: what the parent records of a child
is what the parent itself relayed, never the child's say (a child speaking the protocol
itself, ``tests/support/faulty_children``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import isoagent
from tests.conftest import cli_env
from tests.support.api_env import use_server
from tests.support.cli import read_jsonl, run_cli
from tests.support.faulty_children import FORGED_ANSWER, LIED_CALLS
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply

REPO = Path(__file__).resolve().parent.parent
TOKENS = LIED_CALLS * 15  # the test server's answers: 10 tokens in, 5 out


def faulty(behaviour: str, folder: Path) -> str:
    return f"{sys.executable} -m tests.support.faulty_children {behaviour} {folder}"


def test_a_childs_tokens_and_turns_are_those_the_gateway_relayed_not_its_word(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """A child that made three model calls and says it used no token in no turn: the -o
    line, `logs` and its cost count the three answers the gateway relayed, and one line
    says the child said otherwise."""
    (tmp_path / "tasks.txt").write_text("lie\n")
    env = cli_env(api_server, ISOAGENT_CHILD_COMMAND=faulty("lie-usage", tmp_path))
    env["PYTHONPATH"] = str(REPO)
    done = run_cli(["batch", "tasks.txt", "-o", "out.jsonl"], env, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    (line,) = read_jsonl(tmp_path / "out.jsonl")
    assert (line["turns"], sum(line["tokens"].values())) == (LIED_CALLS, TOKENS)
    (listed,) = json.loads(run_cli(["logs", "--json"], env, cwd=tmp_path).stdout)
    assert (listed["tokens"], listed["turns"]) == (TOKENS, LIED_CALLS)
    assert listed["cost_usd"] == line["cost_usd"] > 0
    said = (
        f"warning: child 001 said it used 0 tokens in 0 turns; the gateway relayed {TOKENS} "
        f"tokens in {LIED_CALLS} turns, which its records keep"
    )
    assert done.stderr.count(said) == 1, done.stderr


def test_the_python_apis_result_counts_what_the_gateway_relayed(
    api_server: MessagesServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_server(monkeypatch, api_server, tmp_path / "home")
    monkeypatch.setenv("ISOAGENT_CHILD_COMMAND", faulty("lie-usage", tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    result = isoagent.task("lie", workdir=tmp_path)
    assert (result.turns, result.usage.total) == (LIED_CALLS, TOKENS)
    assert result.cost_usd > 0


def test_send_message_goes_on_from_the_parents_record_not_from_words_the_child_wrote(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """A child that writes an answer its model never gave into its conversation is ended
    before the gateway sees it; the continuation send_message starts goes on from the
    answers the gateway relayed, and the transcript holds no such answer for `logs`."""

    def handler(req: Request) -> Reply:
        if req.is_parent and req.turn == 0:
            task = {"description": "keep", "prompt": "remember zebra", "subagent_type": "Explore"}
            return tool_reply("Agent", task)
        if req.is_parent and req.turn == 1:
            return tool_reply("SendMessage", {"to": "001", "message": "what did you say?"})
        if req.is_parent:
            return text_reply(str(req.tool_results[0]["content"]).split("\n")[0])
        if "what did you say?" in req.text():
            return text_reply("FORGED" if FORGED_ANSWER in req.text() else "only: noted")
        return text_reply("noted")

    api_server.handler = handler
    env = cli_env(api_server, ISOAGENT_CHILD_COMMAND=faulty("first-forge-history", tmp_path))
    env["PYTHONPATH"] = str(REPO)
    done = run_cli(["run", "go"], env, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout == "only: noted\n"
    assert all(FORGED_ANSWER not in r.text() for r in api_server.requests)
    run = next((tmp_path / ".isoagent" / "runs").iterdir())
    first = json.loads((run / "run.jsonl").read_text().splitlines()[-1])["children"][0]
    assert first["result"]["error"] == (
        "child wrote message 4 as its model's answer, which the model never gave"
    )
    assert FORGED_ANSWER not in (run / "child-001-Explore.jsonl").read_text()
    shown = run_cli(["logs", "last", "--full"], env, cwd=tmp_path).stdout
    assert "noted" in shown and FORGED_ANSWER not in shown
