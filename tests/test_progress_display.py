"""The progress lines on stderr: live on a terminal, plain lines elsewhere."""

from __future__ import annotations

import asyncio
import io

from isoagent.parent.cli.display import ProgressDisplay
from isoagent.parent.records.events import (
    ChildFinished,
    ChildProgress,
    ChildStarted,
    MessageAdded,
    RunFinished,
    RunStarted,
)
from isoagent.protocol import Progress, Result, TextBlock, Usage
from tests.support.terminal import screen_of

STARTED = ChildStarted("001", "Explore", "find test framework", "p", "m", 42, "t.jsonl")
PROGRESS = ChildProgress("001", "Explore", "find test framework", Progress("tool_end", 1, 5, 3.2))
DONE = ChildFinished(
    "001", "Explore", "find test framework", 42, "t.jsonl", Result("s", "ok", 3, 8, Usage(), 5.1)
)


def test_one_line_per_child_when_not_a_terminal() -> None:
    """Off a terminal (a log, CI) a child's end is its one line; the closing line is -v's."""
    stream = io.StringIO()
    display = ProgressDisplay(stream, live=False)
    for event in (STARTED, PROGRESS, DONE, FINISHED):
        display(event)
    assert stream.getvalue() == "  [Explore] find test framework - done (8 tools, 5.1s)\n"


def delta(text: bytes) -> bytes:
    """A streamed text delta, as the API sends it."""
    return (
        b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"%s"}}' % text
    )


def test_the_parents_thinking_is_a_live_line_with_the_tokens_it_streamed() -> None:
    stream = io.StringIO()

    async def scenario() -> None:
        display = ProgressDisplay(stream, live=True)
        display(RunStarted("r", "runs/r", "claude-sonnet-4-5", ".", []))
        display(MessageAdded("user", [TextBlock("go")], 0))
        for _ in range(10):  # 40 characters of text: about 10 tokens
            display.hear("", delta(b"abcd"))
        display.hear("001", delta(b"x"))  # a child's: not the parent's thinking
        await asyncio.sleep(0.6)  # the next tick draws it
        display(MessageAdded("assistant", [TextBlock("done")], 0, usage=Usage(1000, 200)))
        display(FINISHED)

    asyncio.run(scenario())
    out = stream.getvalue()
    assert "  parent: thinking " in out and ", ~10 tokens" in out and "~11" not in out
    # one turn: the answer the parent had (a RunFinished's turns are its main agent's alone)
    assert screen_of(out) == ["isoagent: 1 turn, 1,200 tokens, $0.0060; runs/r"]


FINISHED = RunFinished(Result("s", "ok", 3, 8, Usage(), 5.1), "runs/r")


def test_live_line_is_redrawn_in_place_and_keeps_ticking() -> None:
    stream = io.StringIO()

    async def scenario() -> None:
        display = ProgressDisplay(stream, live=True)
        display(STARTED)
        display(PROGRESS)
        before = stream.getvalue().count("find test framework ... 5 tools")
        await asyncio.sleep(1.2)  # no events: the ticker redraws on its own
        assert stream.getvalue().count("find test framework ... 5 tools") >= before + 2
        display(DONE)

    asyncio.run(scenario())
    out = stream.getvalue()
    assert "  [Explore] find test framework ... 5 tools, " in out
    assert screen_of(out) == ["  [Explore] find test framework - done (8 tools, 5.1s)"]


def test_failed_child_says_why() -> None:
    stream = io.StringIO()
    failed = Result("", "crashed", 1, 2, Usage(), 0.05, error="child exited (killed by SIGKILL)")
    ProgressDisplay(stream, live=False)(
        ChildFinished("002", "Plan", "plan it", 7, "t.jsonl", failed)
    )
    assert stream.getvalue() == (
        "  [Plan] plan it - crashed (2 tools, 50ms): child exited (killed by SIGKILL)\n"
    )
