"""The child's end of the pipe: frames out on the saved protocol fd, frames in on stdin.

A reader thread owns stdin. Model replies go to a queue the agent loop waits
on, the replies to calls of an SDK server's tools (``McpCall``), to questions for the
parent's hooks (``HookCall``) and to its own ``Agent`` calls (``TaskCall``) to their callers;
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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from isoagent.child.agent.process_tree import QUIET_THREADS
from isoagent.child.agent.tools.base import ToolContext
from isoagent.protocol import (
    Cancel,
    ChildFrame,
    FrameError,
    FrameReader,
    FrameWriter,
    Heartbeat,
    HookCall,
    HookReply,
    McpCall,
    McpReply,
    ModelCall,
    ModelError,
    ModelReply,
    TaskCall,
    TaskReply,
)

if TYPE_CHECKING:  # a child imports the task tool only when it has one
    from isoagent.child.agent.tools.task import TaskInput

EXIT_PARENT_GONE = 3


class ParentChannel:
    def __init__(self, reader: FrameReader, writer: FrameWriter, ctx: ToolContext) -> None:
        self.reader = reader
        self.writer = writer
        self.ctx = ctx
        self.replies: queue.Queue[ModelReply] = queue.Queue()
        self._write_lock = threading.Lock()  # also guards the calls under way
        # McpCall, HookCall and TaskCall under way, by id: where the reply goes, and the reply a
        # Cancel gives instead
        self._calls: dict[int, tuple[queue.Queue[Any], Callable[[str], Any]]] = {}
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
        return self._request(
            lambda call: McpCall(call, server, tool, arguments),
            lambda call, why: McpReply(call, f"cancelled: {why}", is_error=True),
        )

    def ask_hooks(self, call: HookCall) -> HookReply:
        """What the parent's hooks decide of one of the agent's steps (a Cancel: stop)."""
        return self._request(
            lambda id_: msgspec.structs.replace(call, id=id_),
            lambda id_, why: HookReply(id_, stop=f"cancelled: {why}"),
        )

    def delegate(self, inp: TaskInput) -> TaskReply:
        """Its own ``Agent`` call, asked of the parent (which may refuse it)."""
        return self._request(
            lambda call: TaskCall(call, inp.description, inp.prompt, inp.subagent_type),
            lambda call, why: TaskReply(call, f"cancelled: {why}", is_error=True),
        )

    def _request(
        self, frame: Callable[[int], ChildFrame], cancelled: Callable[[int, str], Any]
    ) -> Any:
        """Send ``frame`` (given its id) and wait for the parent's reply to it."""
        waiting: queue.Queue[Any] = queue.Queue(1)
        with self._write_lock:
            call = next(self._ids)
            self._calls[call] = (waiting, lambda why: cancelled(call, why))
            self.writer.write(frame(call))
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
                case McpReply(id=call) | HookReply(id=call) | TaskReply(id=call):
                    with self._write_lock:
                        caller = self._calls.pop(call, None)
                    if caller is not None:
                        caller[0].put(frame)
                case Cancel(reason=reason):
                    self.ctx.cancelled.set()
                    self.ctx.end_commands()
                    self.replies.put(ModelReply(turn=-1, error=ModelError("cancelled", reason)))
                    with self._write_lock:
                        calls, self._calls = self._calls, {}
                    for waiting, cancelled in calls.values():
                        waiting.put(cancelled(reason))
