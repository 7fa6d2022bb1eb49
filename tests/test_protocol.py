"""The wire protocol: every frame round-trips, big frames pass, bad bytes are clear errors."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import textwrap

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from isoagent.parent.children.connection import FrameInbox
from isoagent.protocol import (
    PROTOCOL_VERSION,
    AgentSpec,
    Cancel,
    ChildFrame,
    FrameError,
    FrameReader,
    FrameWriter,
    Heartbeat,
    Hello,
    Identity,
    Message,
    ModelCall,
    ModelError,
    ModelReply,
    ParentFrame,
    Progress,
    Result,
    Task,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
    decode_frame,
    encode_frame,
)
from isoagent.protocol.framing import MAX_FRAME, FrameAssembler, decoded_size

CONVERSATION = [
    Message("user", [TextBlock("find the tests")]),
    Message("assistant", [TextBlock("looking"), ToolUseBlock("t1", "Bash", {"command": "ls"})]),
    Message("user", [ToolResultBlock("t1", "tests/\n", is_error=False)]),
]
CHILD_FRAMES = [
    Hello(PROTOCOL_VERSION, 123),
    ModelCall(3, "m", 100, "sys", CONVERSATION, [ToolSpec("Bash", "run", {"type": "object"})]),
    Progress("tool_start", 1, 2, 0.5, tool="Bash", detail="ls"),
    Result("done", "ok", 2, 1, Usage(5, 6), 1.5),
    Heartbeat(),
]
PARENT_FRAMES = [
    Task("go", AgentSpec("Explore", "d", "p", ["Bash"]), "m", "/w", "/t"),
    ModelReply(3, [TextBlock("hi")], "end_turn", Usage(1, 2)),
    ModelReply(4, error=ModelError("auth", "bad key", 401)),
    Cancel("user pressed Ctrl-C"),
    Heartbeat(),
    Task(
        "go",
        AgentSpec("Explore", "d", "p", ["Bash"]),
        "m",
        "ws",
        "",
        identity=Identity("run-1-003", 2, "run-1", "003"),
        heartbeat=15.0,
    ),
]


@pytest.mark.parametrize("frame", CHILD_FRAMES, ids=lambda f: type(f).__name__)
def test_child_frames_round_trip(frame: object) -> None:
    assert decode_frame(encode_frame(frame)[4:], ChildFrame) == frame  # type: ignore[arg-type]


@pytest.mark.parametrize("frame", PARENT_FRAMES, ids=lambda f: type(f).__name__)
def test_parent_frames_round_trip(frame: object) -> None:
    assert decode_frame(encode_frame(frame)[4:], ParentFrame) == frame  # type: ignore[arg-type]


def test_a_parent_frame_is_not_accepted_as_a_child_frame() -> None:
    with pytest.raises(FrameError, match="undecodable"):
        decode_frame(encode_frame(Cancel("x"))[4:], ChildFrame)


def test_50_mb_frame_crosses_a_real_pipe_between_processes() -> None:
    writer = textwrap.dedent(
        """
        import os, sys
        from isoagent.protocol import FrameWriter, ModelCall, Message, ToolResultBlock
        big = "x" * 50_000_000 + "END"
        call = ModelCall(1, "m", 1, "", [Message("user", [ToolResultBlock("t", big)])])
        FrameWriter(1).write(call)
        """
    )
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        [sys.executable, "-c", writer], stdout=subprocess.PIPE, cwd=repo, env={**os.environ}
    )
    assert proc.stdout is not None
    frame = FrameReader(proc.stdout.fileno(), ChildFrame).read()
    assert proc.wait(timeout=60) == 0
    assert isinstance(frame, ModelCall)
    content = frame.messages[0].content[0]
    assert isinstance(content, ToolResultBlock)
    assert len(content.content) == 50_000_003 and content.content.endswith("END")


def pipe_with(data: bytes) -> FrameReader:
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    return FrameReader(read, ChildFrame)


def test_text_on_the_pipe_is_an_error_not_a_wait() -> None:
    with pytest.raises(FrameError, match="not a frame"):
        pipe_with(b"Traceback (most recent call last):\n").read()


def test_truncated_frame_is_an_error() -> None:
    with pytest.raises(FrameError, match="ended"):
        pipe_with(encode_frame(Hello(1, 2))[:-3]).read()


def test_eof_between_frames_is_a_clean_end() -> None:
    reader = pipe_with(encode_frame(Hello(1, 2)))
    assert reader.read() == Hello(1, 2)
    assert reader.read() is None


def test_frames_written_one_after_another_are_read_in_order() -> None:
    read, write = os.pipe()
    for frame in CHILD_FRAMES:
        FrameWriter(write).write(frame)
    os.close(write)
    reader = FrameReader(read, ChildFrame)
    assert [reader.read() for _ in CHILD_FRAMES] == CHILD_FRAMES


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=64), max_size=40))
def test_frames_fed_in_pieces_of_any_size_come_out_whole(cuts: list[int]) -> None:
    stream = b"".join(encode_frame(frame) for frame in CHILD_FRAMES)
    frames = FrameAssembler(ChildFrame)
    out, at = [], 0
    for size in [*cuts, len(stream)]:
        out += frames.feed(stream[at : at + size])
        at += size
    frames.end()
    assert out == CHILD_FRAMES


def test_a_frame_of_megabytes_fed_in_pipe_sized_chunks_comes_out_whole() -> None:
    output = "line of tool output\n" * 200_000  # 4 MB
    call = ModelCall(1, "m", 100, "", [Message("user", [ToolResultBlock("t1", output)])])
    stream = encode_frame(call) + encode_frame(CHILD_FRAMES[0])
    frames = FrameAssembler(ChildFrame)
    chunk = 256 * 1024  # what an asyncio pipe transport reads at a time
    out = [f for at in range(0, len(stream), chunk) for f in frames.feed(stream[at : at + chunk])]
    assert out == [call, CHILD_FRAMES[0]]


def test_a_frame_nested_too_deep_is_a_frame_error() -> None:
    body = b"\x91" * 100_000 + b"\xc0"  # arrays in arrays, 100,000 deep
    frames = FrameAssembler(ChildFrame)
    with pytest.raises(FrameError, match="undecodable"):
        list(frames.feed(len(body).to_bytes(4, "big") + body))


def test_frames_before_a_corrupt_one_reach_the_parent_then_the_error() -> None:
    async def read(data: bytes) -> list[object]:
        read, write = os.pipe()
        os.write(write, data)
        os.close(write)
        inbox = FrameInbox()
        seen: list[object] = []
        with open(read, "rb", buffering=0) as pipe:
            loop = asyncio.get_running_loop()
            transport, _ = await loop.connect_read_pipe(lambda: inbox, pipe)
            try:
                while (frame := await inbox.next()) is not None:
                    seen.append(frame)
            except FrameError as exc:
                seen.append(exc)
            transport.close()
        return seen

    good = encode_frame(CHILD_FRAMES[0]) + encode_frame(CHILD_FRAMES[1])
    first, second, error = asyncio.run(read(good + b"\x00\x00\x00\x02\xc1\xc1"))
    assert [first, second] == CHILD_FRAMES[:2]
    assert isinstance(error, FrameError) and "undecodable" in str(error)
    assert asyncio.run(read(good)) == CHILD_FRAMES[:2]  # then a clean end
    *_, cut = asyncio.run(read(good + encode_frame(CHILD_FRAMES[2])[:-1]))
    assert isinstance(cut, FrameError) and "ended inside a frame" in str(cut)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_decoding_arbitrary_bytes_raises_only_frame_error(body: bytes) -> None:
    for union in (ChildFrame, ParentFrame):
        with contextlib.suppress(FrameError):
            decode_frame(body, union)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=4, max_size=64))
def test_reading_arbitrary_streams_raises_only_frame_error(data: bytes) -> None:
    reader = pipe_with(data)
    try:
        while reader.read() is not None:
            pass
    except FrameError:
        pass


def test_oversized_header_is_rejected_before_reading_the_body() -> None:
    with pytest.raises(FrameError, match=str(MAX_FRAME)):
        pipe_with((MAX_FRAME + 1).to_bytes(4, "big")).read()


def test_child_keeps_the_protocol_fd_free_of_printed_text() -> None:
    script = textwrap.dedent(
        """
        import os, sys
        from isoagent.child.main import take_protocol_fd
        fd = take_protocol_fd()
        print("noise from print")
        os.system("echo noise from a subprocess")
        sys.stdout.flush()
        os.write(fd, b"FRAME")
        """
    )
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, cwd=repo, timeout=30, check=True
    )
    assert done.stdout == b"FRAME"
    assert b"noise from print" in done.stderr and b"noise from a subprocess" in done.stderr


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=40) | st.dictionaries(st.text(), inner, max_size=40),
    max_leaves=200,
)


def objects_size(value: object) -> int:
    """What ``value`` takes in memory: each object's size, the garbage collector's header of
    each container, and each one's slot in its container (a shared one counted each time)."""
    size = sys.getsizeof(value) + 8
    if isinstance(value, list):
        return size + 16 + sum(map(objects_size, value))
    if isinstance(value, dict):
        return size + 16 + sum(objects_size(k) + objects_size(v) for k, v in value.items())
    return size


@given(json_values)
# a str past a fixstr's 31 bytes is counted at its characters' width: one character past
# U+00FF makes each character two bytes, one past U+FFFF four (a random run may miss them)
@example("0" * 40 + "\u0100")
@example("0" * 40 + "\U00010000")
@settings(max_examples=100, deadline=None)
def test_decoded_size_counts_at_least_what_decoding_makes(value: object) -> None:
    """What a child's frame decodes into is counted before it is decoded: never less than
    the objects msgspec makes of it, whatever its items."""
    body = msgspec.msgpack.encode(value)
    assert objects_size(msgspec.msgpack.decode(body)) <= decoded_size(body, 1 << 40)
