"""Record and replay of model calls: ``--record FILE`` and ``--replay FILE``.

A cassette is JSONL, one ``Recorded`` line (request and response) per model
call, written as each call completes. A replay answers a call with the
recorded response to the same conversation -- agent, turn and messages --
never by the order calls arrive in, so children running concurrently replay
correctly in any order; identical conversations take their responses in
recorded order. The system prompt (it names the workspace), the model and the
tool list are not compared, so a recording replays from any directory.

Strict matching compares every message exactly, except the text of ``Agent``
results (the child's conversation is matched on its own; the rest is timings
and paths); loose matching ignores the text of every tool result (pids,
timings, paths), but never whether a tool failed.
A call that matches nothing fails with one line naming the first message that
differs from the closest recorded call; when a child's miss makes its caller's
next call miss too, the caller's call fails with the child's message.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict, deque
from pathlib import Path
from typing import Literal

import msgspec

from isoagent.child.agent.builtin_agents import TASK_TOOL
from isoagent.parent.model.gateway import ModelSource
from isoagent.parent.records.run_folder import write_all
from isoagent.protocol import (
    Block,
    Message,
    ModelCall,
    ModelError,
    ModelReply,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

MatchMode = Literal["strict", "loose"]
Key = tuple[str, int, bytes]

_SNIPPET = 40


class CassetteError(Exception):
    pass


class Recorded(msgspec.Struct):
    """One line of a cassette: a model call and what answered it."""

    request: ModelCall
    response: ModelReply


class RecordingSource:
    """Passes calls to ``inner`` and appends each call and its reply to ``path``.

    A call whose line cannot be written (a full disk) fails, saying so: a run recorded
    in part must not end as if its recording were whole. Every later call fails the same
    way without being made: it could only be paid for and lost.
    """

    def __init__(self, inner: ModelSource, path: Path) -> None:
        try:
            self._file = path.open("wb", buffering=0)
        except OSError as exc:
            raise CassetteError(f"cannot write the recording {path}: {exc.strerror}") from None
        self.inner = inner
        self.path = path
        self._end = 0  # of the last whole line
        self._broken: ModelError | None = None  # why a line could not be written

    async def complete(self, call: ModelCall) -> ModelReply:
        if self._broken is None:
            reply = await self.inner.complete(call)
            line = _encoder.encode(Recorded(call, reply)) + b"\n"
            try:
                write_all(self._file, line)
                self._end += len(line)
                return reply
            except OSError as exc:
                with contextlib.suppress(OSError):  # no line cut short: it stays loadable
                    self._file.truncate(self._end)
                self._broken = ModelError(
                    "replay", f"cannot write the recording {self.path}: {exc.strerror}"
                )
        return ModelReply(turn=call.turn, error=self._broken)

    async def aclose(self) -> None:
        self._file.close()
        await self.inner.aclose()


_encoder = msgspec.json.Encoder()


def load(path: Path) -> list[Recorded]:
    """Every recorded call in ``path``; a line that is not one is a CassetteError."""
    decoder = msgspec.json.Decoder(Recorded)
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise CassetteError(f"cannot read the recording {path}: {exc.strerror}") from None
    entries = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entries.append(decoder.decode(line))
        except msgspec.DecodeError as exc:
            raise CassetteError(
                f"{path}:{number}: not a recorded model call (written by --record?): {exc}"
            ) from None
    if not entries:
        raise CassetteError(f"{path} holds no recorded model calls")
    return entries


class ReplaySource:
    """Answers model calls from a cassette: no network, no key."""

    def __init__(self, path: Path, match: MatchMode = "strict") -> None:
        self.path = path
        self.match = match
        self.recorded = load(path)
        self._replies: dict[Key, deque[ModelReply]] = defaultdict(deque)
        for entry in self.recorded:
            self._replies[_key(entry.request, match)].append(entry.response)
        self.misses: list[str] = []

    async def complete(self, call: ModelCall) -> ModelReply:
        replies = self._replies.get(_key(call, self.match))
        if replies:
            return msgspec.structs.replace(replies.popleft(), turn=call.turn)
        miss = self._earlier_miss(call) or self._explain(call)
        self.misses.append(miss)
        return ModelReply(turn=call.turn, error=ModelError("replay", miss))

    async def aclose(self) -> None:
        pass  # nothing open: the cassette was read whole

    def _earlier_miss(self, call: ModelCall) -> str | None:
        """A child's miss comes back in its caller's next call: the child's miss is the cause."""
        results = [b.content for b in call.messages[-1].content if isinstance(b, ToolResultBlock)]
        return next((miss for miss in self.misses if any(miss in r for r in results)), None)

    def _explain(self, call: ModelCall) -> str:
        head = f"replay miss in {self.path} (agent {call.agent!r}, turn {call.turn})"
        same_agent = [e.request for e in self.recorded if e.request.agent == call.agent]
        if not same_agent:
            agents = ", ".join(sorted({repr(e.request.agent) for e in self.recorded}))
            return f"{head}: the recording has no call of this agent (it has {agents})"
        candidates = [r for r in same_agent if r.turn == call.turn] or same_agent
        now = _comparable(call.messages, self.match)
        closest = max(
            (_comparable(r.messages, self.match) for r in candidates),
            key=lambda old: _common_prefix(old, now),
        )
        same = _common_prefix(closest, now)
        if same == len(now) == len(closest):
            return f"{head}: every recorded reply to this conversation has been used"
        hint = ""
        if self.match == "strict" and _key(call, "loose") in {_key(r, "loose") for r in candidates}:
            hint = "; only tool output differs: --replay-match loose would ignore it"
        recorded = closest[same] if same < len(closest) else None
        current = now[same] if same < len(now) else None
        return (
            f"{head}: message {same + 1} differs from the closest recorded call: "
            f"{_difference(recorded, current)}{hint}"
        )


_key_encoder = msgspec.json.Encoder(order="sorted")


def _key(call: ModelCall, match: MatchMode) -> Key:
    return call.agent, call.turn, _key_encoder.encode(_comparable(call.messages, match))


def _comparable(messages: list[Message], match: MatchMode) -> list[Message]:
    """The messages as matching sees them: without the text of the tool results it ignores.

    Loose ignores every tool result's text. Strict ignores only that of ``Agent`` results:
    a child's conversation is matched on its own, and the rest is its timing and the path
    of its transcript, different in every run.
    """
    ignored = {
        b.id
        for m in messages
        for b in m.content
        if isinstance(b, ToolUseBlock) and (match == "loose" or b.name == TASK_TOOL)
    }
    if not ignored:
        return messages
    return [
        Message(
            m.role,
            [
                msgspec.structs.replace(b, content="")
                if isinstance(b, ToolResultBlock) and b.tool_use_id in ignored
                else b
                for b in m.content
            ],
        )
        for m in messages
    ]


def _common_prefix(a: list[Message], b: list[Message]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _difference(recorded: Message | None, current: Message | None) -> str:
    """What differs between two messages, in one line."""
    if recorded is None:
        assert current is not None
        return f"this call has a {current.role} message the recording lacks"
    if current is None:
        return f"the recording has a {recorded.role} message this call lacks"
    if recorded.role != current.role:
        return f"its role is {current.role}, recorded {recorded.role}"
    for index, (old, new) in enumerate(zip(recorded.content, current.content, strict=False), 1):
        if old != new:
            return f"{current.role} block {index}: {_block_difference(old, new)}"
    return (
        f"{current.role} message has {len(current.content)} blocks, "
        f"recorded {len(recorded.content)}"
    )


def _block_difference(old: Block, new: Block) -> str:
    if type(old) is not type(new):
        return f"{_kind(new)}, recorded {_kind(old)}"
    if isinstance(old, TextBlock) and isinstance(new, TextBlock):
        return "text " + _text_difference(old.text, new.text)
    if isinstance(old, ToolUseBlock) and isinstance(new, ToolUseBlock):
        if old.name != new.name:
            return f"tool_use of {new.name}, recorded {old.name}"
        old_input, new_input = (_key_encoder.encode(b.input).decode() for b in (old, new))
        return f"{new.name} input " + _text_difference(old_input, new_input)
    if isinstance(old, ToolResultBlock) and isinstance(new, ToolResultBlock):
        if old.is_error != new.is_error:
            state = {True: "an error", False: "not an error"}
            return f"tool_result is {state[new.is_error]}, recorded {state[old.is_error]}"
        if old.tool_use_id != new.tool_use_id:
            return f"tool_result for {new.tool_use_id}, recorded for {old.tool_use_id}"
        return "tool_result " + _text_difference(old.content, new.content)
    return f"{_kind(new)} differs"  # thinking: replayed replies carry it unchanged


def _kind(block: Block) -> str:
    return block.__struct_config__.tag  # type: ignore[return-value]


def _text_difference(old: str, new: str) -> str:
    """Where two strings first differ, with a short excerpt of each (escaped, one line)."""
    at = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), None)
    if at is None:
        at = min(len(old), len(new))
    start = max(at - _SNIPPET // 2, 0)

    def excerpt(text: str) -> str:
        part = text[start : start + _SNIPPET]
        return (
            ("..." if start else "") + repr(part) + ("..." if len(text) > start + _SNIPPET else "")
        )

    return f"differs at character {at + 1}: now {excerpt(new)}, recorded {excerpt(old)}"
