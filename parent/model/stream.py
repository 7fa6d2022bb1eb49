"""A streamed Messages API answer, assembled into a ``ModelReply`` from its events.

Every model call is sent with ``"stream": true``: bytes flow for as long as the model
writes, so a long turn never looks idle to a proxy and no read waits the whole turn. The
answer is server-sent events (``event: ...`` and ``data: {json}`` lines, a blank line
after each); ``EventSplitter`` cuts the bytes into each event's data and msgspec decodes
it into the typed events below, about twice as fast as the SDK's own SSE decoder and
without its pydantic model of every event. ``Assembly`` builds the message from them: a
block's text, thinking and tool input are joined when the block stops.

An answer is whole once its ``message_delta`` says why it stopped. One cut before that,
or an ``error`` event in its midst (the API's ``overloaded_error``), is an error of the
kind the gateway retries: nothing of the cut half is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import msgspec

from isoagent.protocol import (
    Block,
    ModelError,
    ModelReply,
    RedactedThinkingBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
    WebSearchResultBlock,
)
from isoagent.protocol.frames import ModelErrorKind

# Who hears each event of the model call under way (its JSON, as the API sent it), for
# ``--include-partial-messages``: the gateway sets it for the call's task. None, the default,
# costs the stream nothing.
listener: ContextVar[Callable[[bytes], None] | None] = ContextVar("listener", default=None)


class SentUsage(msgspec.Struct):
    """Usage as sent: some servers send the cache counts as null, or not at all."""

    input_tokens: int | None = 0
    output_tokens: int | None = 0
    cache_creation_input_tokens: int | None = 0
    cache_read_input_tokens: int | None = 0

    def counts(self) -> Usage:
        return Usage(*(value or 0 for value in msgspec.structs.astuple(self)))


class _DeltaUsage(msgspec.Struct):
    """A ``message_delta``'s usage: the counts it has changed since ``message_start``."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _Started(msgspec.Struct):
    id: str = ""
    usage: SentUsage = msgspec.field(default_factory=SentUsage)


class MessageStart(msgspec.Struct, tag_field="type", tag="message_start"):
    message: _Started


class ContentBlockStart(msgspec.Struct, tag_field="type", tag="content_block_start"):
    index: int
    content_block: dict[str, Any]


class TextDelta(msgspec.Struct, tag_field="type", tag="text_delta"):
    text: str


class InputJsonDelta(msgspec.Struct, tag_field="type", tag="input_json_delta"):
    partial_json: str


class ThinkingDelta(msgspec.Struct, tag_field="type", tag="thinking_delta"):
    thinking: str


class SignatureDelta(msgspec.Struct, tag_field="type", tag="signature_delta"):
    signature: str


class ContentBlockDelta(msgspec.Struct, tag_field="type", tag="content_block_delta"):
    index: int
    delta: TextDelta | InputJsonDelta | ThinkingDelta | SignatureDelta


class ContentBlockStop(msgspec.Struct, tag_field="type", tag="content_block_stop"):
    index: int


class _Stopped(msgspec.Struct):
    stop_reason: str | None = None


class MessageDelta(msgspec.Struct, tag_field="type", tag="message_delta"):
    delta: _Stopped
    usage: _DeltaUsage | None = None


class MessageStop(msgspec.Struct, tag_field="type", tag="message_stop"):
    pass


class Ping(msgspec.Struct, tag_field="type", tag="ping"):
    pass


class _Problem(msgspec.Struct):
    type: str = "api_error"
    message: str = ""


class Error(msgspec.Struct, tag_field="type", tag="error"):
    error: _Problem


Event = (
    MessageStart
    | ContentBlockStart
    | ContentBlockDelta
    | ContentBlockStop
    | MessageDelta
    | MessageStop
    | Ping
    | Error
)


class _Typed(msgspec.Struct):
    """Any event, by its type only: to tell one of a kind the API has added since (to be
    skipped, as its documentation asks) from a malformed one."""

    type: str = ""
    delta: _Typed | None = None


_decoder = msgspec.json.Decoder(Event)
_typed = msgspec.json.Decoder(_Typed)
_KNOWN = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
    }
)
_KNOWN_DELTAS = frozenset({"text_delta", "input_json_delta", "thinking_delta", "signature_delta"})

BLOCK_TYPES: dict[str, type[Block]] = {
    "text": TextBlock,
    "tool_use": ToolUseBlock,
    "thinking": ThinkingBlock,  # kept: the API wants them back with the tool results
    "redacted_thinking": RedactedThinkingBlock,
    "server_tool_use": ServerToolUseBlock,  # web search: the API ran it; it goes back as is
    "web_search_tool_result": WebSearchResultBlock,
}

# what a mid-stream ``error`` event's type is, as the HTTP status the API would have sent
_ERRORS: dict[str, tuple[ModelErrorKind, int]] = {
    "overloaded_error": ("overloaded", 529),
    "rate_limit_error": ("rate_limit", 429),
    "api_error": ("server", 500),
}


def decode(data: bytes) -> Event | None:
    """One event's data; None for a kind of event (or of delta) this code does not know."""
    try:
        return _decoder.decode(data)
    except msgspec.ValidationError:
        typed = _typed.decode(data)
        if typed.type not in _KNOWN or (
            typed.type == "content_block_delta"
            and typed.delta is not None
            and typed.delta.type not in _KNOWN_DELTAS
        ):
            return None
        raise


class EventSplitter:
    """Bytes of an event stream in, each event's data out (``data:`` lines, joined)."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        text = self._rest + chunk
        if b"\r" in text:  # CRLF or CR line ends; one split across chunks waits for the next
            carry = text.endswith(b"\r")
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if carry:
                text = text[:-1]
        else:
            carry = False
        *events, rest = text.split(b"\n\n")
        self._rest = rest + b"\r" if carry else rest
        found = []
        for event in events:
            if event.startswith(b"event:"):  # the usual shape: one event line, one data line
                _, _, data = event.partition(b"\n")
                if data.startswith(b"data:") and b"\n" not in data:
                    found.append(data[5:])
                    continue
            if data := _data(event):
                found.append(data)
        return found


def one_line(data: bytes) -> bytes:
    """An event's JSON, decoded already, on one line: data sent over several ``data:`` lines is
    joined by newlines, which JSON allows between its tokens but a JSON-lines reader does not."""
    return data.replace(b"\n", b" ").strip()


def _data(event: bytes) -> bytes:
    """An event's ``data:`` lines joined, as the SSE specification says ("": none)."""
    lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(line[6:] if line[5:6] == b" " else line[5:] for line in lines)


class Assembly:
    """A message as its events arrive; ``reply`` once it is whole."""

    def __init__(self, turn: int) -> None:
        self.turn = turn
        self.events = 0
        self.error: ModelError | None = None  # an ``error`` event said so
        self.stop_reason: str | None = None
        self.message_id = ""
        self._usage = SentUsage()
        self._blocks: dict[int, dict[str, Any]] = {}
        self._parts: dict[int, list[str]] = {}
        self._content: list[Block] = []

    def add(self, event: Event | None) -> None:
        self.events += 1
        if isinstance(event, ContentBlockDelta):
            delta = event.delta
            parts = self._parts.get(event.index)
            if parts is None:
                return
            if isinstance(delta, TextDelta):
                parts.append(delta.text)
            elif isinstance(delta, InputJsonDelta):
                parts.append(delta.partial_json)
            elif isinstance(delta, ThinkingDelta):
                parts.append(delta.thinking)
            else:
                self._blocks[event.index]["signature"] = delta.signature
        elif isinstance(event, ContentBlockStart):
            self._blocks[event.index] = event.content_block
            self._parts[event.index] = []
        elif isinstance(event, ContentBlockStop):
            self._stop_block(event.index)
        elif isinstance(event, MessageStart):
            self.message_id = event.message.id
            self._usage = event.message.usage
        elif isinstance(event, MessageDelta):
            self.stop_reason = event.delta.stop_reason or self.stop_reason or ""
            if event.usage is not None:
                for name, value in msgspec.structs.asdict(event.usage).items():
                    if value is not None:
                        setattr(self._usage, name, value)
        elif isinstance(event, Error):
            kind, status = _ERRORS.get(event.error.type, ("api", 0))
            said = f"{event.error.type}: {event.error.message}"
            self.error = ModelError(kind, f"the answer broke off with {said}", status)

    def _stop_block(self, index: int) -> None:
        block = self._blocks.pop(index, None)
        parts = self._parts.pop(index, None)
        kind = BLOCK_TYPES.get(block.get("type", "") if block is not None else "")
        if block is None or parts is None or kind is None:
            return  # a kind of block we do not ask for: dropped
        if kind is TextBlock:
            block["text"] = block.get("text", "") + "".join(parts)
        elif kind is ThinkingBlock:
            block["thinking"] = block.get("thinking", "") + "".join(parts)
        elif (kind is ToolUseBlock or kind is ServerToolUseBlock) and parts:
            block["input"] = msgspec.json.decode("".join(parts) or "{}")
        self._content.append(msgspec.convert(block, kind))

    @property
    def whole(self) -> bool:
        return self.error is None and self.stop_reason is not None

    def reply(self) -> ModelReply:
        return ModelReply(
            self.turn, self._content, self.stop_reason or "", self._usage.counts(),
            id=self.message_id,
        )  # fmt: skip
