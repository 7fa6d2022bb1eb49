"""Progress on a terminal, looked at as a person would: real ``isoagent`` processes on a pty of
a common size (80x24, the default of most terminals; a narrow 40x15; a wide 200x50) whose
output is read into a terminal emulator's screen. While the run goes on its live lines are on
the screen (the scripted model holds its answer until they are: no timing is asserted); once
it ends the screen holds exactly the lines that stay (each child's end, the closing line) and
the results on stdout, and no row of the live block is left behind, however many children ran
and however long their lines were."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support.messages_server import (
    MessagesServer,
    Reply,
    Request,
    text_reply,
    tool_reply,
    tools_reply,
)
from tests.support.terminal import Terminal

SIZES = [(80, 24), (40, 15), (200, 50)]
SIZE_IDS = ["80x24", "40x15", "200x50"]
# longer than a narrow terminal's width once the agent type and the counts are added
LONG = "find every place where the configuration file is read and explain it"
CLOSING = re.compile(
    r"isoagent: [\d,]+ turns?, (?:[\d,]+ child(?:ren)?, )?[\d,]+ tokens, \$0\.\d{4}; "
    r"\.isoagent/runs/\d{8}-\d{6}-[0-9a-f]{6}"
)
BATCH_CLOSING = re.compile(
    r"isoagent: batch: (\d+)/\1 done, 0 failed, [\d.]+m?s, [\d,]+ tokens, \$0\.\d{4}; "
    r"\.isoagent/runs/\d{8}-\d{6}-[0-9a-f]{6}"
)


def held_until(terminal: Terminal, words: str, then: Reply, times: int = 1) -> Reply:
    """``then``, once ``words`` are on the screen (the model is still answering)."""
    assert terminal.wait_for(words, times=times), f"never on the screen: {words!r}"
    return then


@pytest.mark.parametrize(("columns", "rows"), SIZES, ids=SIZE_IDS)
def test_a_run_with_more_children_than_rows_leaves_its_closing_line_and_answer_alone(
    columns: int, rows: int, api_server: MessagesServer, tmp_path: Path
) -> None:
    terminal = Terminal(columns, rows)
    children = rows + 2 if rows < 50 else 3  # more than fit, but on the wide terminal
    seen = "more running" if children > rows - 1 else f"[Explore] 00 {LONG[:10]}"

    def handler(req: Request) -> Reply:
        if req.is_parent and req.turn == 0:
            task = {"prompt": "look", "subagent_type": "Explore"}
            calls = [("Agent", {**task, "description": f"{n:02d} {LONG}"}) for n in range(children)]
            return held_until(terminal, "parent: thinking", tools_reply(calls))
        if not req.is_parent:
            return held_until(terminal, seen, text_reply("looked"))
        return text_reply("found it")

    api_server.handler = handler
    args = ["run", "go", "--max-parallel", str(children)]
    terminal.run(args, cli_env(api_server), tmp_path)
    *ended, closing, answer = terminal.lines()
    assert answer == "found it"
    assert CLOSING.fullmatch(closing), closing
    assert f", {children} children, " in closing and f" {2 + children} turns, " in closing
    done = re.compile(rf"  \[Explore\] \d\d {LONG} - done \(0 tools, [\d.]+m?s\)")
    assert len(ended) == children and all(done.fullmatch(line) for line in ended), ended


@pytest.mark.parametrize(("columns", "rows"), SIZES, ids=SIZE_IDS)
def test_a_task_whose_line_is_wider_than_the_terminal_leaves_no_row_behind(
    columns: int, rows: int, api_server: MessagesServer, tmp_path: Path
) -> None:
    terminal = Terminal(columns, rows)
    # the live line redrawn several times (every half second) before the answer
    api_server.handler = lambda req: held_until(
        terminal, "[general-purpose]", text_reply("found it"), times=4
    )
    terminal.run(["task", LONG], cli_env(api_server), tmp_path)
    lines = terminal.lines()
    assert len(lines) == 3, lines
    done, closing, answer = lines
    head = re.escape(f"  [general-purpose] {LONG[:47]}...")  # the description: 50 characters
    assert re.fullmatch(rf"{head} - done \(0 tools, [\d.]+s\)", done), lines
    assert CLOSING.fullmatch(closing) and answer == "found it", lines


def test_a_terminal_made_narrower_during_a_task_gets_rows_cut_to_its_new_width(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    terminal = Terminal(120, 30)

    def handler(req: Request) -> Reply:
        assert terminal.wait_for("[general-purpose]", times=2)
        seen = len(terminal.text)
        terminal.resize(40, 15)  # the next redraws measure it again
        assert terminal.changed.acquire()
        try:
            redrawn = terminal.changed.wait_for(
                lambda: terminal.text.count("[general-purpose]", seen) >= 2, 60
            )
        finally:
            terminal.changed.release()
        assert redrawn
        return text_reply("found it")

    api_server.handler = handler
    terminal.run(["task", LONG], cli_env(api_server), tmp_path)
    lines = terminal.lines()
    assert len(lines) == 3, lines
    head = re.escape(f"  [general-purpose] {LONG[:47]}...")
    assert re.fullmatch(rf"{head} - done \(0 tools, [\d.]+s\)", lines[0]), lines
    assert CLOSING.fullmatch(lines[1]) and lines[2] == "found it", lines


def _tasks(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "tasks.jsonl"
    lines = [json.dumps({"id": f"t{n:02d}", "prompt": f"{LONG} {n}"}) for n in range(count)]
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _batch_handler(terminal: Terminal) -> object:
    def handler(req: Request) -> Reply:
        if req.first_user_text.endswith(" 2"):  # the bar is drawn, and then drawn again
            return held_until(terminal, "batch: [", text_reply("did it"), times=3)
        return text_reply("did it")

    return handler


@pytest.mark.parametrize(("columns", "rows"), SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("how", ["stdout", "-o", "stdin"])
def test_a_batch_leaves_its_result_lines_and_closing_line_and_no_bar(
    how: str, columns: int, rows: int, api_server: MessagesServer, tmp_path: Path
) -> None:
    """Without -o the result lines go to the same terminal as the bar: each is whole, on
    lines of its own; ``stdin``: ``head -8 tasks.jsonl | isoagent batch - -j 2``."""
    terminal = Terminal(columns, rows)
    tasks = _tasks(tmp_path, 8)
    api_server.handler = _batch_handler(terminal)
    args = ["batch", "tasks.jsonl", "-j", "2"]
    env = cli_env(api_server)
    if how == "-o":
        terminal.run([*args, "-o", "out.jsonl"], env, tmp_path)
        *results, closing = terminal.lines()
        assert results == []
        assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 8
    else:
        if how == "stdin":
            args[1] = "-"
        stdin = tasks.read_bytes() if how == "stdin" else None
        terminal.run(args, env, tmp_path, input=stdin)
        *results, closing = terminal.lines()
        records = [json.loads(line) for line in results]
        assert sorted(r["id"] for r in records) == [f"t{n:02d}" for n in range(8)]
    assert BATCH_CLOSING.fullmatch(closing), terminal.lines()
    assert "[" not in closing


@pytest.mark.parametrize(("columns", "rows"), SIZES, ids=SIZE_IDS)
def test_a_batch_of_message_batches_draws_nothing_after_its_closing_line(
    columns: int, rows: int, api_server: MessagesServer, tmp_path: Path
) -> None:
    terminal = Terminal(columns, rows)
    _tasks(tmp_path, 4)
    api_server.handler = _batch_handler(terminal)
    api_server.batch_delay = 0.3
    args = ["batch", "tasks.jsonl", "-j", "4", "-o", "out.jsonl", "--api-batches"]
    terminal.run([*args, "--batch-window", "0.2"], cli_env(api_server), tmp_path)
    lines = terminal.lines()
    closing = next(n for n, line in enumerate(lines) if line.startswith("isoagent: batch:"))
    assert BATCH_CLOSING.fullmatch(lines[closing]), lines
    assert [line for line in lines[closing + 1 :]] == [
        "isoagent: sent 1 Message Batch, 4 requests"
    ], lines
    assert not any(line.startswith("batch: [") for line in lines), lines
    assert all(line.startswith("isoagent: round ") for line in lines[:closing]), lines


def test_a_verbose_batch_on_a_terminal_writes_each_tool_call_above_the_bar(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    terminal = Terminal(80, 24)
    _tasks(tmp_path, 3)

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("Bash", {"command": f"echo {req.first_user_text[-1]}"})
        return held_until(terminal, "batch: [", text_reply("did it"))

    api_server.handler = handler
    args = ["batch", "tasks.jsonl", "-j", "1", "-o", "out.jsonl", "-v"]
    terminal.run(args, cli_env(api_server), tmp_path)
    lines = terminal.lines()
    calls = [line for line in lines if ": Bash echo " in line]
    assert len(calls) == 3 and all(line.startswith("  [general-purpose] task t0") for line in calls)
    assert BATCH_CLOSING.fullmatch(lines[-1]), lines
    assert not any("batch: [" in line for line in lines), lines
