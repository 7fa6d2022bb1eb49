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
from tests.support.faulty_children import LIED_CALLS
from tests.support.messages_server import MessagesServer

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
        f"in {LIED_CALLS}, which its records keep"
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
