"""The claude-agent-sdk's side of ``--input-format stream-json``: the lines it writes on
stdin, read by a thread of their own, and the lines isoagent writes back (control requests of
its own, answers to the SDK's), each in one write."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from isoagent.parent.cli.errors import fail
from isoagent.parent.cli.exit_codes import ExitCode
from isoagent.parent.settings import Settings

if TYPE_CHECKING:
    from isoagent.parent.agent.permission_prompt import Decision
    from isoagent.parent.claude_code.slash_commands import Command


class Inbox:
    """stdin's messages, read by a thread of their own: a control request that comes while
    a run is going is answered at once, not after the run; ``interrupt`` ends the parent's
    turn at its next step and ends the children running (see ``Session.interrupt``). An
    interrupt is always answered at once: it is for every prompt read before it (a run
    still starting, one not started yet), which ``interrupted(prompt)`` tells."""

    def __init__(self, during_run: Callable[[Inbox, dict[str, Any]], None]) -> None:
        self.during_run = during_run  # answers a control request that comes during a run
        self.running = threading.Event()
        self.interrupt: Callable[[], None] | None = None  # the running session's
        self.stop_task: Callable[[str], bool] | None = None  # and its stop_child
        self.prompts_read = 0  # user messages read from stdin so far
        self.interrupted_upto = 0  # the prompts read before the last interrupt
        self.prompt = 0  # the one the running (or last) run is for: its number, from 1
        self.spent = 0.0  # US dollars the session's runs spent, under --max-budget-usd
        self.cost = 0.0  # what the session's runs cost, as their results say
        self.settings: Settings | None = None  # the running (or last) run's
        self.context_tokens = 0  # the parent's context after its last answer
        self.forward_subagent_text = False  # initialize's forwardSubagentText
        self.commands: dict[str, Command] | None = None  # the slash commands, once read
        self._queue: queue.Queue[dict[str, Any] | str | None] = queue.Queue()
        self._asked: dict[str, queue.Queue[dict[str, Any] | None]] = {}  # by request id
        self._ids = itertools.count(1)
        threading.Thread(target=self._read, daemon=True, name="stdin").start()

    def interrupted(self) -> bool:
        """Whether an interrupt came for the running run's prompt (see ``prompt``); the
        run asks once its session can be interrupted."""
        return self.interrupted_upto >= self.prompt > 0

    def next(self) -> dict[str, Any] | None:
        """The next message between runs (None at the end of stdin)."""
        item = self._queue.get()
        if isinstance(item, str):
            fail(f"--input-format stream-json: not a JSON object: {item[:80]!r}", ExitCode.USAGE)
        return item

    def _read(self) -> None:
        for line in _lines(0 if sys.stdin is not None else -1):
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                self._queue.put(line.decode("utf-8", "replace"))
                return
            request = message.get("request")
            interrupt = isinstance(request, dict) and request.get("subtype") == "interrupt"
            if message.get("type") == "control_request" and (self.running.is_set() or interrupt):
                self.during_run(self, message)
            elif message.get("type") == "control_response":
                self._answered(message.get("response"))
            else:
                self.prompts_read += message.get("type") == "user"
                self._queue.put(message)
        for waiting in list(self._asked.values()):  # nobody is left to answer
            waiting.put(None)
        self._queue.put(None)

    def ask(
        self,
        tool: str,
        tool_input: dict[str, Any],
        cancelled: threading.Event,
        asked: dict[str, Any],
    ) -> Decision:
        """Claude Code's ``can_use_tool`` request (``asked``: its suggestions and reasons),
        and the SDK's answer (a cancelled run, or stdin's end, is a no)."""
        from isoagent.parent.agent.permission_prompt import Decision

        request = {"subtype": "can_use_tool", "tool_name": tool, "display_name": tool,
                   "input": tool_input, **asked}  # fmt: skip
        response = self.control(request, cancelled)
        if response is None:
            why = "cancelled" if cancelled.is_set() else "the SDK has gone"
            return Decision(False, tool_input, why)
        if response.get("subtype") != "success":
            return Decision(False, tool_input, str(response.get("error", "")))
        verdict = response.get("response") or {}
        if verdict.get("behavior") == "allow":
            updated = verdict.get("updatedInput")
            return Decision(True, updated if isinstance(updated, dict) else tool_input)
        if verdict.get("interrupt") and self.interrupt is not None:
            self.interrupt()
        return Decision(False, tool_input, str(verdict.get("message", "")))

    def control(
        self,
        request: dict[str, Any],
        cancelled: threading.Event | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any] | None:
        """Send the SDK a control request; its response (None: ``cancelled``, no answer
        within ``timeout`` seconds, or stdin ended). Any thread may ask."""
        request_id = f"isoagent-{next(self._ids)}"
        answer: queue.Queue[dict[str, Any] | None] = queue.Queue(1)
        self._asked[request_id] = answer
        send({"type": "control_request", "request_id": request_id, "request": request})
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                with contextlib.suppress(queue.Empty):
                    return answer.get(timeout=0.2)
                if cancelled is not None and cancelled.is_set():
                    return None
                if deadline is not None and time.monotonic() > deadline:
                    return None
        finally:
            del self._asked[request_id]

    def hook_callback(self, request: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """An SDK hook callback's answer (``parent/agent/hooks.py``)."""
        return self.control(request, timeout=timeout)

    def _answered(self, response: object) -> None:
        if isinstance(response, dict):
            waiting = self._asked.get(str(response.get("request_id")))
            if waiting is not None:
                waiting.put(response)


def _lines(fd: int) -> Iterator[bytes]:
    """The lines of ``fd``, read with ``os.read``: a thread blocked here holds no lock of
    ``sys.stdin``'s, which would abort the interpreter's exit."""
    pending = b""
    while fd >= 0:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        yield from lines
    if pending:
        yield pending


def respond(request: dict[str, Any], answer: dict[str, Any] | None, error: str) -> None:
    """A control response: ``answer`` (success) or ``error``, as one line in one write (the
    stdin thread may answer while a run writes its stream)."""
    response: dict[str, Any] = {"request_id": request.get("request_id")}
    if answer is not None:
        response.update(subtype="success", response=answer)
    else:
        response.update(subtype="error", error=error)
    send({"type": "control_response", "response": response})


def send(message: dict[str, Any]) -> None:
    """One line to the SDK, in one write (the stdin thread may write while a run writes
    its stream)."""
    line = json.dumps(message) + "\n"
    with contextlib.suppress(BrokenPipeError, ValueError):  # the SDK has gone
        sys.stdout.buffer.write(line.encode())
        sys.stdout.buffer.flush()
