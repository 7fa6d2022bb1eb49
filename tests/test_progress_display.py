"""The progress lines on stderr: live on a terminal, plain lines elsewhere."""

from __future__ import annotations

import asyncio
import io

from isoagent.parent.cli.display import ProgressDisplay
from isoagent.parent.records.events import ChildFinished, ChildProgress, ChildStarted
from isoagent.protocol import Progress, Result, Usage

STARTED = ChildStarted("001", "Explore", "find test framework", "p", "m", 42, "t.jsonl")
PROGRESS = ChildProgress("001", "Explore", "find test framework", Progress("tool_end", 1, 5, 3.2))
DONE = ChildFinished(
    "001", "Explore", "find test framework", 42, "t.jsonl", Result("s", "ok", 3, 8, Usage(), 5.1)
)


def test_plain_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    display = ProgressDisplay(stream, live=False)
    for event in (STARTED, PROGRESS, DONE):
        display(event)
    assert stream.getvalue() == (
        "  [Explore] find test framework ...\n"
        "  [Explore] find test framework - done (8 tools, 5.1s)\n"
    )


def test_live_line_is_redrawn_in_place_and_keeps_ticking() -> None:
    stream = io.StringIO()

    async def scenario() -> None:
        display = ProgressDisplay(stream, live=True)
        display(STARTED)
        display(PROGRESS)
        before = stream.getvalue().count("\x1b[1F")
        await asyncio.sleep(1.2)  # no events: the ticker redraws on its own
        assert stream.getvalue().count("\x1b[1F") >= before + 2
        display(DONE)

    asyncio.run(scenario())
    out = stream.getvalue()
    assert "  [Explore] find test framework ... 5 tools, " in out
    assert out.endswith("  [Explore] find test framework - done (8 tools, 5.1s)\n")


def test_failed_child_says_why() -> None:
    stream = io.StringIO()
    failed = Result("", "crashed", 1, 2, Usage(), 0.05, error="child exited (killed by SIGKILL)")
    ProgressDisplay(stream, live=False)(
        ChildFinished("002", "Plan", "plan it", 7, "t.jsonl", failed)
    )
    assert stream.getvalue() == (
        "  [Plan] plan it - crashed (2 tools, 50ms): child exited (killed by SIGKILL)\n"
    )
