"""Progress on a terminal, as a user sees it: stderr is a pty. The scripted model holds its
first answer until the progress line a user waits for is on the screen, so the line shows
while the call is still in flight (no timing is asserted); at the end one line says the
run's tokens, cost and run folder."""

from __future__ import annotations

import os
import pty
import subprocess
import threading
from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support.cli import ISOAGENT
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply


class Screen:
    """What a process writes to its terminal (stderr on a pty), read as it comes."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        self.text = ""
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the last writer closed it
                return
            if not chunk:
                return
            with self.changed:
                self.text += chunk.decode(errors="replace")
                self.changed.notify_all()

    def wait_for(self, words: str, seconds: float = 60) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: words in self.text, seconds)


def run_on_terminal(args: list[str], env: dict[str, str], cwd: Path, screen: Screen) -> str:
    """``isoagent ARGS`` with stderr on ``screen``'s terminal; its stdout."""
    done = subprocess.run(
        [*ISOAGENT, *args], env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=screen.slave, text=True, timeout=120,
    )  # fmt: skip
    os.close(screen.slave)
    assert done.returncode == 0, screen.text
    return done.stdout


def held_until(screen: Screen, words: str, then: Reply) -> Reply:
    """``then``, once ``words`` are on the screen (the model is still answering)."""
    assert screen.wait_for(words), f"never on the screen: {words!r}\n{screen.text}"
    return then


@pytest.mark.parametrize(
    ("args", "seen"),
    [
        (["run", "go"], "parent: thinking"),
        (["-p", "-v", "go"], "parent: thinking"),
        (["task", "go"], "[general-purpose] go ... 0 tools"),
    ],
    ids=["run", "print-mode-verbose", "task"],
)
def test_progress_shows_while_the_model_answers_and_a_closing_line_at_the_end(
    args: list[str], seen: str, api_server: MessagesServer, tmp_path: Path
) -> None:
    screen = Screen()

    def handler(req: Request) -> Reply:
        if req.is_parent and req.turn == 0:
            task = {"description": "look", "prompt": "look", "subagent_type": "Explore"}
            return held_until(screen, seen, tool_reply("Agent", task))
        if not req.is_parent and req.turn == 0 and args[0] == "task":
            return held_until(screen, seen, text_reply("found it"))
        return text_reply("found it")

    api_server.handler = handler
    stdout = run_on_terminal(args, cli_env(api_server), tmp_path, screen)
    assert stdout == "found it\n"
    closing = screen.text.rstrip().splitlines()[-1].split("\x1b[J")[-1]  # the live lines cleared
    assert closing.startswith("isoagent: ") and " tokens, $0." in closing
    assert "; .isoagent/runs/" in closing
    if args[0] != "task":
        assert "1 child" in closing and "[Explore] look - done" in screen.text


def test_a_batch_on_a_terminal_draws_a_bar_with_an_eta_and_ends_with_cost_and_run_folder(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    screen = Screen()
    (tmp_path / "tasks.txt").write_text("one\ntwo\nthree\n")

    def handler(req: Request) -> Reply:
        if req.first_user_text == "three":  # two are done: the bar knows a rate
            return held_until(screen, "ETA ", text_reply("did three"))
        return text_reply(f"did {req.first_user_text}")

    api_server.handler = handler
    args = ["batch", "tasks.txt", "-j", "1", "-o", "out.jsonl"]
    run_on_terminal(args, cli_env(api_server), tmp_path, screen)
    assert "batch: [#############.......] 2/3 done, 1 running, 0 failed, " in screen.text
    closing = screen.text.rstrip().splitlines()[-1].split("\x1b[K")[-1]
    assert closing.startswith("batch: 3/3 done, 0 failed, ") and " tokens, $0." in closing
    assert "; .isoagent/runs/" in closing
