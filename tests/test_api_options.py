"""``isoagent.Options`` checks every value when it is built: an ``OptionError`` names the
field, what it may be, and the nearest valid name or value; nothing starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import isoagent
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"sandbox": "readonly"}, "sandbox='readonly': it must be 'auto', 'off', 'workspace' or "
         "'read-only'; did you mean 'read-only'?"),
        ({"max_turns": "5"}, "max_turns='5': it must be an int"),
        ({"max_turns": -1}, "max_turns=-1: it must be at least 0"),
        ({"timeout": float("nan")}, "timeout=nan: it must be at least 1"),
        ({"verbose": 1}, "verbose=1: it must be True or False"),
        ({"effort": "hgih"}, "effort='hgih': it must be 'low', 'medium', 'high', 'max' or None; "
         "did you mean 'high'?"),
        ({"child_network": "yes"}, "child_network='yes': it must be 'off', 'on' or 'host'"),
        ({"setting_sources": ["usr"]}, "setting_sources=['usr']: it must be a list of 'user', "
         "'project' or 'local' or None"),
        ({"add_dirs": "src"}, "add_dirs='src': it must be a list of str or Path"),
        ({"agents": {"rev": 3}}, "agents={'rev': 3}: it must be a mapping of str to "
         "AgentDefinition or mapping of str to anything or None"),
        ({"workdir": "/no/such/folder"}, "workdir='/no/such/folder': it is not a folder"),
        ({"replay": "/no/such.jsonl"}, "replay='/no/such.jsonl': there is no such file"),
        ({"modle": "haiku"}, "unknown option 'modle'; did you mean 'model'?"),
    ],
)  # fmt: skip
def test_each_bad_value_is_refused_when_options_are_built_naming_the_field(
    values: dict[str, Any], says: str
) -> None:
    with pytest.raises(isoagent.OptionError) as raised:
        isoagent.Options(**values)
    assert str(raised.value).endswith(says)


def test_an_agent_definition_checks_its_values_too() -> None:
    with pytest.raises(isoagent.OptionError, match=r"AgentDefinition max_turns='3'.* an int"):
        isoagent.AgentDefinition(description="d", prompt="p", max_turns="3")  # type: ignore[arg-type]


def test_a_misspelt_keyword_of_task_says_the_nearest_option_and_nothing_starts(
    api_server: MessagesServer, workspace: Path
) -> None:
    with pytest.raises(isoagent.OptionError, match=r"'max_turn'; did you mean 'max_turns'\?$"):
        isoagent.task("x", workdir=workspace, max_turn=3)
    with pytest.raises(isoagent.OptionError, match="sandbox='readonly'"):
        isoagent.task("x", workdir=workspace, sandbox="readonly")
    with pytest.raises(isoagent.OptionError, match=r"^unknown option 'zzzz'$"):
        isoagent.Options().replace(zzzz=1)
    assert api_server.requests == []


def test_an_option_error_is_a_value_error_and_a_type_error_too() -> None:
    """``except ValueError`` (a bad value) and ``except TypeError`` (a bad keyword), as
    Python's own, still catch it."""
    assert issubclass(isoagent.OptionError, ValueError | TypeError | isoagent.IsoagentError)


def test_the_cli_refuses_a_bad_value_in_one_line_with_exit_2(
    api_server: MessagesServer, workspace: Path
) -> None:
    done = run_cli(["-p", "x", "--effort", "hgih"], cli_env(api_server), cwd=workspace, input="")
    assert done.returncode == 2
    assert "effort='hgih'" in done.stderr and "did you mean 'high'?" in done.stderr
    assert len(done.stderr.splitlines()) == 1 and api_server.requests == []
