"""Turning a conversation's model calls into ``message`` events, each message once."""

from __future__ import annotations

from contextvars import ContextVar

from isoagent.parent.records.events import MessageAdded, Sink
from isoagent.protocol import ModelCall, ModelReply

# the child whose conversation the task's model call belongs to ("": the parent's), for
# the gateway to say whose a streamed event is
calling_for: ContextVar[str] = ContextVar("calling_for", default="")


class ConversationRecorder:
    """Each ``ModelCall`` carries the whole history; only the new messages are emitted."""

    def __init__(self, sink: Sink, child: str = "", *, seen: int = 0) -> None:
        """``seen``: how many messages of the first call are already recorded (a
        conversation continued from an earlier run)."""
        self.sink = sink
        self.child = child
        self._seen = seen

    @property
    def seen(self) -> int:
        """How many messages of the conversation are recorded."""
        return self._seen

    def before(self, call: ModelCall) -> None:
        calling_for.set(self.child)
        for message in call.messages[self._seen :]:
            self.sink(MessageAdded(message.role, message.content, call.turn, self.child))
        self._seen = len(call.messages)

    def after(self, call: ModelCall, reply: ModelReply) -> None:
        if reply.error is None:
            self.sink(
                MessageAdded(
                    "assistant",
                    reply.content,
                    call.turn,
                    self.child,
                    reply.usage,
                    reply.model,
                    reply.id,
                    reply.stop_reason,
                )
            )
            self._seen += 1
