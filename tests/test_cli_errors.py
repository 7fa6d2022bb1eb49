"""Bad input gets one clear line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import base_env, cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, error_reply, unused_url

# each command runs in-process, then through the warm daemon: the same output and exit codes
pytestmark = pytest.mark.usefixtures("both_paths")


def clean_env() -> dict[str, str]:
    return base_env()


def assert_one_clear_line(stderr: str, *fragments: str) -> None:
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr
    assert any(all(f in line for f in fragments) for line in lines), stderr


def test_empty_prompt_is_a_usage_error(tmp_path: Path) -> None:
    done = run_cli(["run", "  "], clean_env(), cwd=tmp_path)
    assert done.returncode == 2
    assert_one_clear_line(done.stderr, "isoagent:", "prompt is empty")


def test_empty_prompt_from_stdin_is_a_usage_error(tmp_path: Path) -> None:
    done = run_cli(["run", "-"], clean_env(), cwd=tmp_path, input="")
    assert done.returncode == 2
    assert_one_clear_line(done.stderr, "prompt is empty")


def test_unknown_workdir_is_a_usage_error(tmp_path: Path) -> None:
    done = run_cli(["run", "hi", "--workdir", str(tmp_path / "nope")], clean_env(), cwd=tmp_path)
    assert done.returncode == 2
    assert_one_clear_line(done.stderr, "nope", "does not exist")


def test_missing_credentials_say_how_to_set_them(tmp_path: Path) -> None:
    done = run_cli(["run", "hi"], clean_env(), cwd=tmp_path)
    assert done.returncode == 1
    assert_one_clear_line(done.stderr, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
    assert not (tmp_path / ".isoagent").exists()


def test_unreachable_base_url_is_one_line(tmp_path: Path) -> None:
    env = {**clean_env(), "ANTHROPIC_BASE_URL": unused_url(), "ANTHROPIC_API_KEY": "k"}
    done = run_cli(["run", "hi"], env, cwd=tmp_path, timeout=60)
    assert done.returncode == 1
    assert_one_clear_line(done.stderr, "cannot reach http://127.0.0.1:")
    assert "[Errno 111]" in done.stderr  # the OS's words, not the HTTP library's wrapping


def test_wrong_api_key_is_one_line(api_server: MessagesServer, tmp_path: Path) -> None:
    api_server.handler = lambda req: error_reply(401, "authentication_error", "invalid x-api-key")
    done = run_cli(["run", "hi"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 1
    assert_one_clear_line(done.stderr, "rejected the credentials", "invalid x-api-key")
    assert len(api_server.requests) == 1  # a bad key is not retried
    assert done.stdout == ""


def test_prompt_from_stdin(api_server: MessagesServer, tmp_path: Path) -> None:
    done = run_cli(["run", "-"], cli_env(api_server), cwd=tmp_path, input="say ok\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"
    assert api_server.requests[0].first_user_text == "say ok\n"


def test_invalid_base_url_is_one_line(tmp_path: Path) -> None:
    env = {**clean_env(), "ANTHROPIC_BASE_URL": "http://[::1", "ANTHROPIC_API_KEY": "k"}
    done = run_cli(["run", "hi"], env, cwd=tmp_path)
    assert done.returncode == 1
    assert_one_clear_line(done.stderr, "invalid ANTHROPIC_BASE_URL 'http://[::1'")
