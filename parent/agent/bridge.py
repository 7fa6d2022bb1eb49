"""The one bridge between the parent's agent loop and its event loop.

The agent loop (``child/agent/loop.py``) is synchronous: a child runs it on its main thread.
The parent runs the same loop on a thread of its own, so that the event loop stays free for the
children, the gateway and the signals; its model turns cross back through ``GatewayBridge``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import TypeVar

from isoagent.parent.model.conversation import ConversationRecorder
from isoagent.parent.model.gateway import Gateway
from isoagent.protocol import ModelCall, ModelError, ModelReply

T = TypeVar("T")


INTERRUPTED_CALL = "interrupted while the model answered"


class GatewayBridge:
    """The parent loop runs in a thread; its model turns go through the loop's gateway.
    ``abort`` (the SDK's interrupt) cancels the call under way, and every later one: the
    gateway stops reading its answer and the loop hears a cancelled call."""

    def __init__(
        self, gateway: Gateway, loop: asyncio.AbstractEventLoop, recorder: ConversationRecorder
    ) -> None:
        self.gateway = gateway
        self.loop = loop
        self.recorder = recorder
        self.aborted = False
        self.cut = False  # a call was cancelled: the model was answering (or about to)
        self._lock = threading.Lock()
        self._call: concurrent.futures.Future[ModelReply] | None = None

    def complete(self, call: ModelCall) -> ModelReply:
        self.recorder.before(call)
        with self._lock:
            if not self.aborted:
                self._call = asyncio.run_coroutine_threadsafe(self.gateway.call(call), self.loop)
            asked = self._call
        try:
            if asked is None:
                raise concurrent.futures.CancelledError
            reply = asked.result()
        except concurrent.futures.CancelledError:
            self.cut = True
            return ModelReply(turn=call.turn, error=ModelError("cancelled", INTERRUPTED_CALL))
        finally:
            with self._lock:
                self._call = None
        self.recorder.after(call, reply)
        return reply

    def abort(self) -> None:
        """Cancel the model call under way and any to come (from any thread)."""
        with self._lock:
            self.aborted = True
            if self._call is not None:
                self._call.cancel()


async def run_in_thread(fn: Callable[..., T], *args: object) -> T:
    """Like ``asyncio.to_thread``, but on a daemon thread that a Ctrl-C never waits for."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(value: object, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)  # type: ignore[arg-type]

    def deliver(value: object, error: BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
            loop.call_soon_threadsafe(settle, value, error)

    def target() -> None:
        try:
            value = fn(*args)
        except BaseException as exc:
            deliver(None, exc)
        else:
            deliver(value, None)

    context = contextvars.copy_context()  # as to_thread: the caller's (the run's span)
    threading.Thread(target=context.run, args=(target,), daemon=True, name="parent-agent").start()
    return await future
