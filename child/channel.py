"""The child's end of the pipe: frames out on the saved protocol fd, frames in on stdin.

A reader thread owns stdin. Model replies go to a queue the agent loop waits
on, the replies to calls of an SDK server's tools (``McpCall``) and to its own ``task``
calls (``TaskCall``) to their callers;
``Cancel`` sets the cancel flag, ends running commands and those calls; EOF means the
parent is gone, so the child ends its commands and exits at once (no orphans).

Every process of a child carries ``ISOAGENT_CHILD_TAG`` in its environment (the
parent sets it), so one that left its process group and session with ``setsid``
is still found and ended, by the child and by the parent.

Over a link that can go silent without closing (a remote child's), both sides send a
``Heartbeat`` every third of the Task's ``heartbeat`` seconds; a parent silent for
that long counts as gone, as at EOF.
"""

from __future__ import annotations

import _thread
import contextlib
import itertools
import os
import queue
import sys
import threading
import time
from typing import Any

from isoagent.child.agent.process_tree import QUIET_THREADS
from isoagent.child.agent.tools.base import ToolContext
from isoagent.child.agent.tools.task import TaskInput
from isoagent.protocol import (
    Cancel,
    ChildFrame,
    FrameError,
    FrameReader,
    FrameWriter,
    Heartbeat,
    McpCall,
    McpReply,
    ModelCall,
    ModelError,
    ModelReply,
    TaskCall,
    TaskReply,
)

EXIT_PARENT_GONE = 3
Reply = McpReply | TaskReply  # a call's answer


class ParentChannel:
    def __init__(self, reader: FrameReader, writer: FrameWriter, ctx: ToolContext) -> None:
        self.reader = reader
        self.writer = writer
        self.ctx = ctx
        self.replies: queue.Queue[ModelReply] = queue.Queue()
        self._write_lock = threading.Lock()  # also guards the calls under way
        # MCP and task calls under way: where each reply goes, and of which kind it is
        self._calls: dict[int, tuple[queue.Queue[Reply], type[Reply]]] = {}
        self._ids = itertools.count(1)
        self._heard = time.monotonic()  # when the parent last sent a frame

    def start(self, heartbeat: float = 0.0) -> None:
        """Read the parent's frames from now on; over a link that can go silent
        (``heartbeat`` > 0) also say "still here" and end when the parent stops saying it.

        Bare ``_thread`` threads: a ``threading.Thread`` costs a forked child about 1 ms
        more CPU, a tenth of its own (its start-up handshake, and the pages of
        ``threading``'s shared objects it writes)."""
        _thread.start_new_thread(self._read_forever, ())
        if heartbeat > 0:
            self._heard = time.monotonic()
            for target in (self._beat, self._watch):
                _thread.start_new_thread(target, (heartbeat,))

    def _beat(self, silence: float) -> None:
        QUIET_THREADS.add(threading.get_native_id())
        with contextlib.suppress(OSError):  # the link is gone: the reader or _watch ends us
            while True:
                self.send(Heartbeat())
                time.sleep(silence / 3)

    def _watch(self, silence: float) -> None:
        """A thread of its own: a send blocked on a dead link must not keep this one waiting."""
        QUIET_THREADS.add(threading.get_native_id())
        while (quiet := time.monotonic() - self._heard) < silence:
            time.sleep(min(silence - quiet, silence / 3) + 0.01)
        print(f"isoagent child: parent silent for {silence:g} s: ending", file=sys.stderr)
        self.ctx.end_commands()
        os._exit(EXIT_PARENT_GONE)

    def send(self, frame: ChildFrame) -> None:
        with self._write_lock:
            self.writer.write(frame)

    def complete(self, call: ModelCall) -> ModelReply:
        """The child's model: one turn, answered by the parent's gateway."""
        self.send(call)
        return self.replies.get()

    def call_sdk_tool(self, server: str, tool: str, arguments: dict[str, Any]) -> McpReply:
        """A tool of an SDK's in-process server, called through the parent."""
        reply = self._ask(McpCall(next(self._ids), server, tool, arguments), McpReply)
        assert isinstance(reply, McpReply)
        return reply

    def delegate(self, inp: TaskInput) -> TaskReply:
        """Its own ``task`` call, asked of the parent (which may refuse it)."""
        call = TaskCall(next(self._ids), inp.description, inp.prompt, inp.subagent_type)
        reply = self._ask(call, TaskReply)
        assert isinstance(reply, TaskReply)
        return reply

    def _ask(self, frame: McpCall | TaskCall, kind: type[Reply]) -> Reply:
        waiting: queue.Queue[Reply] = queue.Queue(1)
        with self._write_lock:
            self._calls[frame.id] = (waiting, kind)
            self.writer.write(frame)
        return waiting.get()

    def _read_forever(self) -> None:
        QUIET_THREADS.add(threading.get_native_id())  # before it reads a reply: before any tool
        while True:
            try:
                frame = self.reader.read()
            except FrameError as exc:
                print(f"isoagent child: bad frame from parent: {exc}", file=sys.stderr)
                frame = None
            if frame is None:
                self.ctx.end_commands()
                os._exit(EXIT_PARENT_GONE)
            self._heard = time.monotonic()
            match frame:
                case ModelReply():
                    self.replies.put(frame)
                case McpReply(id=call) | TaskReply(id=call):
                    with self._write_lock:
                        asked = self._calls.pop(call, None)
                    if asked is not None:
                        asked[0].put(frame)
                case Cancel(reason=reason):
                    self.ctx.cancelled.set()
                    self.ctx.end_commands()
                    self.replies.put(ModelReply(turn=-1, error=ModelError("cancelled", reason)))
                    with self._write_lock:
                        calls, self._calls = self._calls, {}
                    for call, (waiting, kind) in calls.items():
                        waiting.put(kind(call, f"cancelled: {reason}", is_error=True))
