"""A child whose frame straddles its timeout, started in place of ``python -m isoagent.child``.

``python -m tests.support.split_frame_child``: Hello, takes its Task, writes the
first part of a large Progress frame, waits for the parent's Cancel, then writes
the rest of that frame and its Result (summary ``SUMMARY``) and exits.
"""

from __future__ import annotations

import os

from isoagent.protocol import (
    PROTOCOL_VERSION,
    Cancel,
    FrameReader,
    FrameWriter,
    Hello,
    ParentFrame,
    Progress,
    Result,
    Usage,
    encode_frame,
)

SUMMARY = "found it before the Cancel"
SPLIT = 1000  # bytes of the frame sent before the Cancel: its header and a little body


def main() -> None:
    writer = FrameWriter(1)
    reader = FrameReader(0, ParentFrame)
    writer.write(Hello(PROTOCOL_VERSION, os.getpid()))
    reader.read()  # the Task
    frame = encode_frame(Progress("turn", turns=1, tool_calls=0, elapsed=0.1, detail="x" * 50_000))
    os.write(1, frame[:SPLIT])
    assert isinstance(reader.read(), Cancel)
    view = memoryview(frame)[SPLIT:]
    while view:
        view = view[os.write(1, view) :]
    writer.write(Result(SUMMARY, "cancelled", turns=1, tool_calls=0, usage=Usage(), duration=0.1))


if __name__ == "__main__":
    main()
