"""What a child sends cannot make the parent hold unbounded memory, nor starve its siblings.

The batches run a hostile child (tests/support/faulty_children, ``first-...``: the first
child to start) beside two honest ones, and read the CLI's peak resident memory (VmHWM,
from /proc at its exit) against the same batch with no hostile child in it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from isoagent.parent.children.connection import (
    FRAME_IN_MEMORY,
    SMALL_FRAME,
    WAITING_FRAMES,
    FrameInbox,
    FrameRefused,
)
from isoagent.parent.children.disk_budget import DiskBudget
from isoagent.parent.children.large_results import SUMMARY_LIMIT, ResultFiles
from isoagent.parent.records.run_folder import RunFolder
from isoagent.protocol import (
    FrameError,
    Heartbeat,
    Hello,
    Message,
    ModelCall,
    Progress,
    Result,
    TextBlock,
    Usage,
    encode_frame,
)
from isoagent.protocol.framing import HEADER
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.faulty_children import (
    AMPLIFIERS,
    BIG_SUMMARY,
    ENDLESS_SENT,
    HUGE_SUMMARY,
    summary_chunks,
)
from tests.support.messages_server import MessagesServer
from tests.support.scripts import delegating

GROWTH = 64 << 20  # bytes the CLI's peak may grow by for a hostile child in its batch
TASKS = "first task\nsecond task\nthird task\n"
# the CLI, writing its peak resident memory (kB) to the file named first at its exit
_PEAK = (
    "import atexit, sys\n"
    "out = sys.argv.pop(1)\n"
    "def peak():\n"
    "    status = open('/proc/self/status').read()\n"
    "    kb = next(l.split()[1] for l in status.splitlines() if l.startswith('VmHWM:'))\n"
    "    open(out, 'w').write(kb)\n"
    "atexit.register(peak)\n"
    "from isoagent.parent.cli.main import main\n"
    "main()\n"
)


def hostile_batch(
    server: MessagesServer, folder: Path, behaviour: str, *args: str, hostile: bool = True
) -> tuple[list[dict[str, Any]], int]:
    """``isoagent batch`` of three tasks, the first child to start playing ``behaviour``
    (none with ``hostile=False``): the -o lines, by first line, and the CLI's peak in bytes."""
    workdir = folder / ("hostile" if hostile else "honest")
    workdir.mkdir()
    (workdir / "tasks.txt").write_text(TASKS)
    if not hostile:
        (workdir / "first.claim").touch()  # taken: every child is the real one
    child = f"{sys.executable} -m tests.support.faulty_children first-{behaviour} {workdir}"
    env = cli_env(server, ISOAGENT_CHILD_COMMAND=child)
    command = [sys.executable, "-c", _PEAK, str(workdir / "peak")]
    args = ("batch", "tasks.txt", "-j", "3", "-o", "out.jsonl", *args)
    done = run_cli(list(args), env, cwd=workdir, timeout=120, process=True, command=command)
    assert "Traceback" not in done.stderr, done.stderr
    lines = [json.loads(line) for line in (workdir / "out.jsonl").read_text().splitlines()]
    return sorted(lines, key=lambda line: line["line"]), int((workdir / "peak").read_text()) << 10


def split(lines: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The hostile child's line (the one not ok, or not the model's "ok") and the others'."""
    (hostile,) = [line for line in lines if line["status"] != "ok" or line["summary"] != "ok"]
    return hostile, [line for line in lines if line is not hostile]


def assert_honest_ones_ok(lines: list[dict[str, Any]]) -> None:
    assert len(lines) == 2
    assert all(line["status"] == "ok" and line["summary"] == "ok" for line in lines), lines


def same_as_sent(path: Path, size: int) -> bool:
    """Whether ``path`` holds exactly the summary ``huge-result`` sent, read piece by piece."""
    with path.open("rb") as file:
        return all(file.read(len(chunk)) == chunk for chunk in summary_chunks(size)) and (
            file.read(1) == b""
        )


# --- the whole batch, through the CLI ------------------------------------------


def test_a_300_mb_result_is_cut_and_kept_whole_on_disk_while_its_siblings_end_ok(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    _, honest_peak = hostile_batch(api_server, tmp_path, "huge-result", hostile=False)
    lines, peak = hostile_batch(api_server, tmp_path, "huge-result")

    hostile, honest = split(lines)
    assert_honest_ones_ok(honest)
    assert peak - honest_peak <= GROWTH, (peak, honest_peak)
    assert hostile["status"] == "ok"  # the child's; the parent only cut its summary
    where = f"the whole text is in {Path(hostile['transcript']).with_suffix('.summary.txt')}"
    assert hostile["error"] == f"summary cut at 1 MiB of {HUGE_SUMMARY} bytes; {where}"
    summary = hostile["summary"]
    assert where in summary and "truncated by isoagent" in summary
    assert SUMMARY_LIMIT - 200 < len(summary.encode()) < SUMMARY_LIMIT + 200
    assert summary.startswith("0000000\n0000001\n")
    whole = tmp_path / "hostile" / where.removeprefix("the whole text is in ")
    assert same_as_sent(whole, HUGE_SUMMARY)
    assert not list(whole.parent.glob("*.frame"))  # the spooled frame is gone


def test_an_endless_frame_holds_no_memory_while_it_comes(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    _, honest_peak = hostile_batch(
        api_server, tmp_path, "endless-frame", "--timeout", "10", hostile=False
    )
    lines, peak = hostile_batch(api_server, tmp_path, "endless-frame", "--timeout", "10")

    hostile, honest = split(lines)
    assert_honest_ones_ok(honest)
    assert peak - honest_peak <= GROWTH < ENDLESS_SENT, (peak, honest_peak)
    assert hostile["status"] == "timeout"
    assert hostile["error"].startswith("child timed out after 10 s, inside a frame of ")
    assert f"past {FRAME_IN_MEMORY >> 20} MiB a frame is kept on disk" in hostile["error"]


def test_a_child_that_pipelines_model_calls_is_ended_and_its_siblings_calls_complete(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    lines, _ = hostile_batch(api_server, tmp_path, "flood-calls")

    hostile, honest = split(lines)
    assert_honest_ones_ok(honest)
    assert hostile["status"] == "error"
    assert hostile["error"] == (
        "child sent a ModelCall before its last call was answered: a child makes one model, "
        "MCP or hook call at a time"
    )
    flood = [r for r in api_server.requests if r.first_user_text == "flood"]
    assert len(flood) <= 1  # its first call; none of the 99 it sent behind it
    assert len(api_server.requests) - len(flood) == 2  # each sibling's call


_honest_peaks: list[int] = []


def honest_peak(server: MessagesServer, folder: Path) -> int:
    """The CLI's peak for a batch with no hostile child in it, measured once per worker."""
    if not _honest_peaks:
        _honest_peaks.append(hostile_batch(server, folder, "amplify-x", hostile=False)[1])
    return _honest_peaks[0]


@pytest.mark.parametrize("field", AMPLIFIERS)
def test_a_frame_whose_items_decode_into_far_more_than_its_bytes_is_refused_undecoded(
    field: str, api_server: MessagesServer, tmp_path: Path
) -> None:
    """A frame's bytes do not bound what it decodes into: a few MiB of empty lists in a tool's
    input would take the parent past a GB. Each field where items amplify is counted before
    it is decoded; the child is ended with the bound named, its siblings end ok, and the
    parent's peak stays within 64 MiB of an honest batch's."""
    baseline = honest_peak(api_server, tmp_path)
    lines, peak = hostile_batch(api_server, tmp_path, f"amplify-{field}")

    hostile, honest = split(lines)
    assert_honest_ones_ok(honest)
    assert peak - baseline <= GROWTH, (peak, baseline)
    assert hostile["status"] == "error"
    bound = "that would take more than 32 MiB of the parent's memory decoded, a frame's bound"
    assert bound in hostile["error"], hostile["error"]


BUDGET = "went past its disk budget: the parent writes at most {} MiB for a child in the run folder"


def test_a_child_flooding_its_transcript_is_ended_at_its_disk_budget(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """Each new message of a model call goes to the child's transcript before the gateway
    sees it: a child that adds 4 MiB a call is ended once its transcript would pass
    --child-disk-mb, and the transcript stays within it."""
    lines, _ = hostile_batch(api_server, tmp_path, "flood-transcript", "--child-disk-mb", "10")

    hostile, honest = split(lines)
    assert_honest_ones_ok(honest)
    assert hostile["status"] == "error"
    assert BUDGET.format(10) in hostile["error"], hostile["error"]
    transcript = tmp_path / "hostile" / hostile["transcript"]
    assert 8 << 20 < transcript.stat().st_size <= 10 << 20
    last = json.loads(transcript.read_bytes().splitlines()[-1])
    assert last["type"] == "child_result"  # the record of its end is always written
    assert len([r for r in api_server.requests if r.first_user_text == "first task"]) < 3


def test_a_result_past_the_childs_disk_budget_is_not_spooled_whole(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """A 300 MB Result under --child-disk-mb 100: the spool stops at the budget, the child
    ends naming it, and nothing of it stays in the run folder."""
    lines, _ = hostile_batch(api_server, tmp_path, "huge-result", "--child-disk-mb", "100")

    hostile, honest = split(lines)
    assert_honest_ones_ok(honest)
    assert hostile["status"] == "error"
    assert BUDGET.format(100) in hostile["error"], hostile["error"]
    run = (tmp_path / "hostile" / hostile["transcript"]).parent
    assert sum(f.stat().st_size for f in run.iterdir()) < 4 << 20


def test_the_task_tool_result_says_the_summary_was_cut_and_where_it_is_whole(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = delegating([])
    child = f"{sys.executable} -m tests.support.faulty_children big-result {tmp_path}"
    done = run_cli(["run", "go"], cli_env(api_server, ISOAGENT_CHILD_COMMAND=child), cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    result = api_server.requests[-1].tool_results[0]["content"]
    where = result.split("(the whole text is in ", 1)[1].split(")", 1)[0]
    assert where.endswith("child-001-general-purpose.summary.txt")
    assert "truncated by isoagent" in result and "[subagent general-purpose done" in result
    assert same_as_sent(tmp_path / where, BIG_SUMMARY)


# --- one child's frames, in the parent's inbox ---------------------------------


@pytest.fixture
def inbox(tmp_path: Path) -> FrameInbox:
    """A child's inbox whose large Results go to a run folder in ``tmp_path``."""
    inbox = FrameInbox()
    folder = RunFolder.create(tmp_path / ".isoagent" / "runs")
    inbox.results = ResultFiles(folder, folder.child_stem(1, "x").with_suffix(".jsonl"))
    return inbox


def received(inbox: FrameInbox, *frames: bytes) -> list[object]:
    """What the consumer takes of ``frames`` fed to ``inbox``: frames, then the error."""

    async def take() -> list[object]:
        for frame in frames:
            inbox.data_received(frame)
        inbox.eof_received()
        taken: list[object] = []
        while True:
            try:
                if (frame := await inbox.next()) is None:
                    return taken
            except FrameError as exc:
                return [*taken, exc]
            taken.append(frame)

    return asyncio.run(take())


def call(turn: int) -> bytes:
    return encode_frame(ModelCall(turn, "m", 1, "", [Message("user", [TextBlock("hi")])]))


def test_a_second_call_before_the_answer_to_the_first_is_refused(inbox: FrameInbox) -> None:
    *taken, refused = received(inbox, call(0), call(1))
    assert [type(frame) for frame in taken] == [ModelCall]
    assert isinstance(refused, FrameRefused)
    assert "one model, MCP or hook call at a time" in str(refused)


def test_a_call_after_its_answer_is_taken(inbox: FrameInbox) -> None:
    inbox.data_received(call(0))
    inbox.answered()
    assert [type(frame) for frame in received(inbox, call(1))] == [ModelCall, ModelCall]


def test_a_progress_frame_past_its_bound_is_refused(inbox: FrameInbox) -> None:
    big = encode_frame(Progress("turn", 1, 1, 0.1, detail="x" * SMALL_FRAME))
    (refused,) = received(inbox, big)
    assert isinstance(refused, FrameRefused)
    assert (
        str(refused) == f"sent a Progress frame of {len(big) - 4} bytes: a Progress may have 64 KiB"
    )


def test_frames_the_parent_does_not_take_are_bounded(inbox: FrameInbox) -> None:
    hello = encode_frame(Hello(1, 2))
    *taken, refused = received(inbox, hello * (WAITING_FRAMES + 1))
    assert len(taken) == WAITING_FRAMES and all(isinstance(f, Hello) for f in taken)
    assert isinstance(refused, FrameRefused)
    assert received(FrameInbox(), encode_frame(Heartbeat()) * 1000) == []  # never queued


def test_only_a_result_may_be_larger_than_a_frame_held_in_memory(inbox: FrameInbox) -> None:
    text = "x" * (FRAME_IN_MEMORY + 1)
    big = encode_frame(ModelCall(0, "m", 1, "", [Message("user", [TextBlock(text)])]))
    (refused,) = received(inbox, big)
    assert isinstance(refused, FrameRefused)
    assert str(refused) == (
        f"sent a ModelCall of {len(big) - 4} bytes: only a Result may be over 32 MiB"
    )


def test_a_spooled_result_whose_summary_is_no_text_is_a_corrupt_frame(inbox: FrameInbox) -> None:
    body = encode_frame(Result("@@", "ok", 1, 0, Usage(), 0.1))[HEADER.size :]
    before, after = body.split(b"\xa2@@")
    size = FRAME_IN_MEMORY + 1
    binary = before + b"\xc6" + size.to_bytes(4, "big") + bytes(size) + after  # msgpack bin 32
    (error,) = received(inbox, HEADER.pack(len(binary)) + binary)
    assert isinstance(error, FrameError) and "must be strings" in str(error)


def test_a_summary_past_the_childs_disk_budget_is_cut_and_not_kept(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path / ".isoagent" / "runs")
    transcript = folder.child_stem(1, "x").with_suffix(".jsonl")
    files = ResultFiles(folder, transcript, DiskBudget(1 << 20))
    result = files.bounded(Result("é" * SUMMARY_LIMIT, "ok", 1, 0, Usage(), 0.1))
    assert result.error == (
        f"summary cut at 1 MiB of {2 * SUMMARY_LIMIT} bytes; the whole text could not be kept: "
        f"the child {BUDGET.format(1)} (its transcript, a Result too large to hold and its "
        "summary; --child-disk-mb)"
    )
    assert not files.summary_path.exists()


def test_a_result_held_in_memory_has_its_summary_cut_too(inbox: FrameInbox) -> None:
    summary = "é" * SUMMARY_LIMIT  # 2 MiB of UTF-8
    (result,) = received(inbox, encode_frame(Result(summary, "ok", 1, 0, Usage(), 0.1)))
    assert isinstance(result, Result) and inbox.results is not None
    assert len(result.summary.encode()) < SUMMARY_LIMIT + 200 and "\ufffd" not in result.summary
    assert inbox.results.summary_path.read_text() == summary
