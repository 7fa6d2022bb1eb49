"""The protocol rows: frame encode+decode against stdlib json, and one big frame through a pipe.

``python -m bench.wire SIZE framed|raw CLOCK`` is the writing end of the pipe row:
it builds a ``ModelCall`` carrying a SIZE-byte tool output (or SIZE raw bytes),
writes its start time (CLOCK_MONOTONIC, shared by all processes) to the file
CLOCK, then writes the frame to stdout the way a child does.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from bench.stats import Line, Stat, ratio, reference
from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS
from isoagent.child.agent.tools import make_tools
from isoagent.child.agent.tools.base import ToolContext
from isoagent.parent.children.connection import FrameInbox
from isoagent.parent.children.launch import PACKAGE_ROOT
from isoagent.parent.children.process import widen
from isoagent.protocol import (
    ChildFrame,
    FrameWriter,
    Message,
    ModelCall,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    decode_frame,
    encode_frame,
)
from isoagent.protocol.framing import HEADER, frame_parts

AGENT = BUILTIN_AGENTS["general-purpose"]
MB = 1_000_000


def conversation(turns: int, output: str = "") -> ModelCall:
    """A ``turns``-turn ModelCall as a child sends it: real tool specs, a Bash call a turn."""
    tools = make_tools(AGENT.tools, ToolContext(PACKAGE_ROOT))
    messages = [Message("user", [TextBlock("Find where the frames are encoded and explain.")])]
    for turn in range(turns):
        use = ToolUseBlock(f"toolu_{turn:04d}", "Bash", {"command": f"grep -rn frame src/{turn}"})
        text = "Let me look at the next part of the code before answering. " * 2
        messages.append(Message("assistant", [TextBlock(text), use]))
        listing = output or "".join(
            f"src/{turn}/module_{n}.py:{n * 7}: def encode_frame(frame): return frame  # é\n"
            for n in range(25)
        )
        messages.append(Message("user", [ToolResultBlock(use.id, listing)]))
    return ModelCall(
        turn=turns,
        model="claude-sonnet-5",
        max_tokens=8192,
        system=AGENT.system_prompt,
        messages=messages,
        tools=[tool.spec for tool in tools],
        agent=AGENT.name,
    )


def _rate(op: Callable[[], object], seconds: float) -> float:
    """Operations per second, over at least ``seconds``."""
    done = 0
    started = time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for _ in range(10):
            op()
        done += 10
    return done / elapsed


def codec(turns: int, repeats: int, seconds: float) -> list[Line]:
    call = conversation(turns)
    data = msgspec.to_builtins(call)

    def ours() -> object:
        return decode_frame(encode_frame(call)[HEADER.size :], ChildFrame)

    def stdlib() -> object:
        return json.loads(json.dumps(data).encode())

    if ours() != call:
        raise RuntimeError("a ModelCall did not survive its frame")
    samples: dict[str, list[float]] = {"ours": [], "json": []}
    for _ in range(repeats):
        samples["ours"].append(_rate(ours, seconds))
        samples["json"].append(_rate(stdlib, seconds))
    mine, theirs = Stat(samples["ours"], "ops/s"), Stat(samples["json"], "ops/s")
    size = len(encode_frame(call)) / 1000
    return [
        Line(
            "protocol",
            f"encode + decode a {turns}-turn ModelCall frame ({size:.0f} kB), msgpack framing",
            mine,
            ratio(mine, theirs, "json"),
            "faster than json",
            mine.median > theirs.median,
            notes=[
                "Ours: encode_frame and decode_frame into the typed ChildFrame union. "
                "Stdlib: json.dumps + encode + json.loads of the same data as plain dicts "
                "(no types, no validation)."
            ],
        ),
        reference("protocol", "stdlib `json` dumps + loads, same data", theirs),
    ]


class _RawInbox(asyncio.Protocol):
    """The raw reference's reader: the pipe's bytes copied into one buffer, nothing else."""

    def __init__(self, size: int) -> None:
        self.buffer = memoryview(bytearray(size))
        self.got = 0
        self.full = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.buffer[self.got : self.got + len(data)] = data
        self.got += len(data)
        if self.got == len(self.buffer):
            self.full.set_result(None)


async def _through_pipe(size: int, mode: str) -> float:
    """MB/s from the writer's start (before encoding) to the decoded frame in this process,
    read from a pipe like a child's stdout: widened, and (framed) by a ``FrameInbox``."""
    loop = asyncio.get_running_loop()
    read, write = os.pipe()
    widen(write)
    with tempfile.NamedTemporaryFile() as clock, open(read, "rb", buffering=0) as pipe:
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.wire", str(size), mode, clock.name,
                stdout=write,
                cwd=PACKAGE_ROOT,
            )  # fmt: skip
        finally:
            os.close(write)
        inbox = FrameInbox() if mode == "framed" else _RawInbox(size)
        transport, _ = await loop.connect_read_pipe(lambda: inbox, pipe)
        try:
            if isinstance(inbox, FrameInbox):
                frame = await inbox.next()
                if not isinstance(frame, ModelCall):
                    raise RuntimeError(f"expected a ModelCall, got {type(frame).__name__}")
            else:
                await inbox.full
            arrived = time.monotonic()
        finally:
            transport.close()
            await process.wait()
        started = float(Path(clock.name).read_text())
    return size / MB / (arrived - started)


async def _pipe_samples(size: int, repeats: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"framed": [], "raw": []}
    for _ in range(repeats):
        for mode in samples:
            samples[mode].append(await _through_pipe(size, mode))
    return samples


def _big_call(size: int) -> ModelCall:
    line = "src/parent/supervisor.py:42: a line of tool output, as grep would print it\n"
    return conversation(1, (line * (size // len(line) + 1))[:size])


def _codec_ms(size: int, repeats: int) -> tuple[Stat, Stat]:
    """In-process times of the big frame's two ends: ``frame_parts`` (what FrameWriter
    sends) and ``decode_frame`` of the body (what a FrameAssembler does with it)."""
    call = _big_call(size)
    encode, decode = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        _, body = frame_parts(call)
        encoded = time.perf_counter()
        decode_frame(body, ChildFrame)
        encode.append((encoded - started) * 1000)
        decode.append((time.perf_counter() - encoded) * 1000)
    return Stat(encode, "ms"), Stat(decode, "ms")


def pipe(size: int, repeats: int) -> list[Line]:
    samples = asyncio.run(_pipe_samples(size, repeats))
    framed, raw = Stat(samples["framed"], "MB/s"), Stat(samples["raw"], "MB/s")
    encode, decode = _codec_ms(size, repeats)
    return [
        Line(
            "protocol",
            f"one {size / MB:g} MB tool output in one frame, child process → parent, via a pipe",
            framed,
            ratio(framed, raw, "raw pipe"),
            "≥ 500 MB/s",
            framed.median >= 500,
            notes=[
                "From before the writer encodes (FrameWriter, as a child writes) to the "
                "ModelCall decoded by parent.children.connection.FrameInbox, the protocol of the "
                "asyncio pipe, widened to 1 MiB as a child's stdout. The raw reference "
                "copies the bytes into one buffer as they arrive."
            ],
        ),
        reference("protocol", f"raw pipe: {size / MB:g} MB of bytes, same reader", raw),
        Line("protocol", "of which: `frame_parts` of that ModelCall, in-process", encode),
        Line("protocol", "of which: `decode_frame` of its body, in-process", decode),
    ]


def _write(size: int, mode: str, clock: Path) -> None:
    call = _big_call(size) if mode == "framed" else None
    payload = os.urandom(size) if call is None else b""
    clock.write_text(f"{time.monotonic()!r}")  # CLOCK_MONOTONIC: shared by all processes
    if call is not None:
        FrameWriter(1).write(call)
    else:
        view = memoryview(payload)
        while view:
            view = view[os.write(1, view) :]


if __name__ == "__main__":
    _write(int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
