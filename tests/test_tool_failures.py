"""Whatever a tool does, the agent reads an error result and goes on; nothing crashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply


def parent_calls(name: str, args: dict) -> object:
    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply(name, args)
        result = req.tool_results[0]
        return text_reply(f"error={result.get('is_error', False)} :: {result['content']}")

    return handler


@pytest.mark.parametrize(
    "pattern", ["a{99999999999}", "(" * 3000 + ")" * 3000], ids=["overflow", "recursion"]
)
def test_regex_the_re_module_cannot_compile_is_an_error_result(
    api_server: MessagesServer, tmp_path: Path, pattern: str
) -> None:
    api_server.handler = parent_calls("Grep", {"pattern": pattern})
    done = run_cli(["run", "search"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("error=True :: invalid regex")


@pytest.mark.parametrize("command", ["run", "task"])
def test_file_name_that_is_not_utf8_reaches_the_model_replaced(
    api_server: MessagesServer, tmp_path: Path, command: str
) -> None:
    (tmp_path / "caf\udce9.py").write_text("x = 1\n")  # the bytes b"caf\xe9.py"
    api_server.handler = parent_calls("Glob", {"pattern": "*.py"})
    done = run_cli([command, "list python files"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "caf\ufffd.py" in done.stdout
