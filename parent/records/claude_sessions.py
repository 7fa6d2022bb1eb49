"""Claude Code's session files, kept beside isoagent's run folders for print mode's
sessions, so that what the claude-agent-sdk reads of a session (``get_session_messages``,
``list_subagents``, ``get_subagent_messages``, a ``SessionStore``) reads isoagent's too.

A session's file is ``<projects>/<project key>/<session id>.jsonl`` under Claude Code's
folder (``$CLAUDE_CONFIG_DIR``, else ``~/.claude``), one entry per message of the parent's
conversation, chained by ``parentUuid``, with the uuids the stream gave them; each child's
is ``<session id>/subagents/agent-<child>.jsonl`` beside an ``.meta.json`` naming its agent
type and the ``Agent`` call that started it. Entries are only appended. With
``--session-mirror`` each entry written also goes to stdout as a ``transcript_mirror``
frame, for the SDK's ``SessionStore``.

The run folder stays the record isoagent resumes from; a session file is what it goes on
from when the run folder is not there (a session a ``SessionStore`` brought back) or when
``--resume-session-at`` names a message of it.
"""

from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from uuid import uuid4

import msgspec

from isoagent.parent.claude_code.user_files import config_dir
from isoagent.parent.records.events import ChildStarted, Event, MessageAdded, RunStarted
from isoagent.protocol import Block, Message

Entry = dict[str, Any]
Mirror = Callable[[str, list[Entry]], None]  # (a file's path, the entries appended to it)
_LONGEST_KEY = 200  # Claude Code's longest folder name for a project, before its hash


class ResumeRefused(ValueError):
    """``--resume-session-at`` / ``--resume-drops-turn`` cannot be honoured; says why."""


def project_key(folder: Path) -> str:
    """The folder name Claude Code gives a project's sessions: its real path with every
    character but letters and digits as ``-`` (a long one cut, with a hash of it)."""
    path = unicodedata.normalize("NFC", os.path.realpath(folder))
    key = "".join(c if c.isascii() and c.isalnum() else "-" for c in path)
    return key if len(key) <= _LONGEST_KEY else f"{key[:_LONGEST_KEY]}-{_hash36(path)}"


def _hash36(text: str) -> str:
    """Claude Code's short hash of a long path (JavaScript's 32-bit ``h*31 + c``, base 36)."""
    h = 0
    for char in text:
        h = ((h << 5) - h + ord(char)) & 0xFFFFFFFF
    h = abs(h - (1 << 32) if h >= 1 << 31 else h)
    digits = ""
    while h:
        h, digit = divmod(h, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + digits
    return digits or "0"


def session_path(workdir: Path, session_id: str) -> Path:
    """Where the session's file is (or would be)."""
    return config_dir() / "projects" / project_key(workdir) / f"{session_id}.jsonl"


class SessionFiles:
    """Writes a print-mode run's messages into its session's files, as ``ClaudeFormat``
    converts them (``add``): the stream's uuids, the children's ``Agent`` calls."""

    def __init__(
        self, workdir: Path, version: str, history: list[Message], mirror: Mirror | None
    ) -> None:
        self.workdir = workdir
        self.version = version
        self.history = history  # what the run goes on from: written first into a new file
        self.mirror = mirror
        self.session_id = ""
        self._last: dict[str, str | None] = {}  # the last uuid written, by child ("": main)
        self._agents: dict[str, str] = {}  # the child's agent type

    def add(self, event: Event, message: Entry | None, parent_tool_use_id: str | None) -> None:
        if isinstance(event, RunStarted):
            self._start(event.session_id or event.run_id)
        elif isinstance(event, ChildStarted) and self.session_id:
            self._agents[event.child] = event.agent
            meta = {"agentType": event.agent, "toolUseId": parent_tool_use_id,
                    "description": event.description}  # fmt: skip
            path = self._agent_path(event.child)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.with_name(f"agent-{event.child}.meta.json").write_text(json.dumps(meta))
            if self.mirror is not None:
                self.mirror(str(path), [{"type": "agent_metadata", **meta}])
        elif isinstance(event, MessageAdded) and self.session_id:
            uuid = message.get("uuid") if message else None
            whole = message is not None and event.role == "assistant" and not event.child
            body = message["message"] if message is not None and whole else None  # the stream's
            self._write(event.child, event.role, event.content, uuid, body)

    def _start(self, session_id: str) -> None:
        self.session_id = session_id
        path = self._path("")
        if path.exists():  # the session goes on: its file's last message is the parent
            self._last[""] = _last_uuid(path)
            return
        for message in self.history:
            self._write("", message.role, message.content)

    def _path(self, child: str) -> Path:
        return self._agent_path(child) if child else session_path(self.workdir, self.session_id)

    def _agent_path(self, child: str) -> Path:
        folder = session_path(self.workdir, self.session_id).with_suffix("")
        return folder / "subagents" / f"agent-{child}.jsonl"

    def _write(
        self,
        child: str,
        role: str,
        content: list[Block],
        uuid: str | None = None,
        body: Entry | None = None,
    ) -> None:
        entry: Entry = {
            "parentUuid": self._last.get(child),
            "isSidechain": bool(child),
            "type": role,
            "message": body or {"role": role, "content": _content(content)},
            "uuid": uuid or str(uuid4()),
            "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "userType": "external",
            "cwd": str(self.workdir),
            "sessionId": self.session_id,
            "version": self.version,
        }
        if child:
            entry |= {"agentId": child, "agentType": self._agents.get(child, "")}
        path = self._path(child)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self._last[child] = entry["uuid"]
        if self.mirror is not None:
            self.mirror(str(path), [entry])


def _content(content: list[Block]) -> str | list[Any]:
    """A message's content as Claude Code writes it: a prompt's words as a string."""
    blocks: list[dict[str, Any]] = msgspec.to_builtins(content)
    if all(block["type"] == "text" for block in blocks):
        return "\n".join(block["text"] for block in blocks)
    return blocks


def _last_uuid(path: Path) -> str | None:
    entries = _entries(path)
    return entries[-1]["uuid"] if entries else None


def _entries(path: Path) -> list[Entry]:
    """A session file's user and assistant entries, in the order written."""
    found = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(entry, dict)
            and entry.get("type") in ("user", "assistant")
            and isinstance(entry.get("uuid"), str)
            and isinstance(entry.get("message"), dict)
        ):
            found.append(entry)
    return found


def conversation_in_file(path: Path, at: str = "", drops: str | None = None) -> list[Message]:
    """The conversation of a session file (Claude Code's or isoagent's), to go on with:
    its main chain, up to and with the message ``at`` if given (``--resume-session-at``).
    ``drops`` (``--resume-drops-turn``): the uuid of the prompt that must be the first of
    what is left out; a ``ResumeRefused`` says it is not."""
    chain = _chain(_entries(path))
    if at:
        uuids = [entry["uuid"] for entry in chain]
        if at not in uuids:
            raise ResumeRefused(f"--resume-session-at {at}: no such message in {path}")
        cut = uuids.index(at) + 1
        dropped = chain[cut:]
        if drops is not None and dropped and not _prompt_is(dropped[0], drops):
            first = dropped[0]
            raise ResumeRefused(
                f"Resume rejected by --resume-drops-turn: resuming at {at} would discard "
                f"entries not attributable to turn {drops}: range does not start with the "
                f"declared turn prompt; first discarded entry 1 [type={first['type']}, "
                f"uuid={first['uuid']}]"
            )
        chain = chain[:cut]
    return _messages(chain)


def _prompt_is(entry: Entry, uuid: str) -> bool:
    content = entry["message"].get("content")
    prompt = isinstance(content, str) or not any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content or []
    )
    return entry["type"] == "user" and entry["uuid"] == uuid and prompt


def _chain(entries: list[Entry]) -> list[Entry]:
    """The main conversation: from the last main-chain entry back by ``parentUuid``."""
    main = [e for e in entries if not e.get("isSidechain")]
    if not main:
        return []
    by_uuid = {e["uuid"]: e for e in main}
    chain, seen = [], set()
    current: Entry | None = main[-1]
    while current is not None and current["uuid"] not in seen:
        seen.add(current["uuid"])
        chain.append(current)
        current = by_uuid.get(current.get("parentUuid") or "")
    return chain[::-1]


_KNOWN = frozenset({"text", "tool_use", "tool_result", "thinking", "redacted_thinking"})


def _messages(chain: list[Entry]) -> list[Message]:
    """Entries as the API's messages: one assistant answer written as several entries (as
    Claude Code writes it, a block each) is one message again; blocks isoagent does not
    send are left out; a tool result's content is its words."""
    messages: list[Message] = []
    for entry in chain:
        content = entry["message"].get("content")
        raw = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        blocks = [_block(b) for b in raw if isinstance(b, dict) and b.get("type") in _KNOWN]
        if not blocks:
            continue
        role: Literal["user", "assistant"] = "assistant" if entry["type"] == "assistant" else "user"
        if messages and messages[-1].role == role:
            messages[-1].content.extend(blocks)
        else:
            messages.append(Message(role, blocks))
    return messages


def _block(raw: dict[str, Any]) -> Block:
    data = {k: v for k, v in raw.items() if k != "cache_control"}
    if data["type"] == "tool_result":
        data["content"] = text_of(data.get("content"))
    return msgspec.convert(data, Block)  # type: ignore[arg-type]


def text_of(content: Any) -> str:
    """The text of a message's or a tool result's ``content`` as Claude Code writes it: a
    string, or blocks whose text ones count ("" for anything else)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""
