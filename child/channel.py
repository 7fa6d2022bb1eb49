"""The child's end of the pipe: frames out on the saved protocol fd, frames in on stdin.

A reader thread owns stdin. Model replies go to a queue the agent loop waits
on; ``Cancel`` sets the cancel flag and ends running commands; EOF means the
parent is gone, so the child ends its commands and exits at once (no orphans).

Every process of a child carries ``ISOAGENT_CHILD_TAG`` in its environment (the
parent sets it), so one that left its process group and session with ``setsid``
is still found and ended, by the child and by the parent.
"""

from __future__ import annotations

import os
import queue
import sys
import threading

from isoagent.child.agent.tools.base import ToolContext
from isoagent.protocol import (
    Cancel,
    ChildFrame,
    FrameError,
    FrameReader,
    FrameWriter,
    ModelCall,
    ModelError,
    ModelReply,
)

EXIT_PARENT_GONE = 3


class ParentChannel:
    def __init__(self, reader: FrameReader, writer: FrameWriter, ctx: ToolContext) -> None:
        self.reader = reader
        self.writer = writer
        self.ctx = ctx
        self.replies: queue.Queue[ModelReply] = queue.Queue()
        self._write_lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._read_forever, name="parent-reader", daemon=True).start()

    def send(self, frame: ChildFrame) -> None:
        with self._write_lock:
            self.writer.write(frame)

    def complete(self, call: ModelCall) -> ModelReply:
        """The child's model: one turn, answered by the parent's gateway."""
        self.send(call)
        return self.replies.get()

    def _read_forever(self) -> None:
        while True:
            try:
                frame = self.reader.read()
            except FrameError as exc:
                print(f"isoagent child: bad frame from parent: {exc}", file=sys.stderr)
                frame = None
            if frame is None:
                self.ctx.end_commands()
                os._exit(EXIT_PARENT_GONE)
            if isinstance(frame, ModelReply):
                self.replies.put(frame)
            elif isinstance(frame, Cancel):
                self.ctx.cancelled.set()
                self.ctx.end_commands()
                self.replies.put(ModelReply(turn=-1, error=ModelError("cancelled", frame.reason)))
