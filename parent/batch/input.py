"""``isoagent batch`` input: one task per line.

A line is a JSON object ``{"id": ..., "prompt": ..., "agent": ...}`` (``id`` and
``agent`` optional; any other key is refused, with the nearest known one) or, if it does
not start with ``{``, a plain-text prompt; a JSON string or array (``"text"``, ``["a"]``)
is refused rather than taken as its own literal text.
A task's id is its ``id`` or else a hash of the task (its agent and prompt), so
that it stays the same when lines are added, removed or moved: a resumed batch
knows which tasks it has done. Blank lines are skipped. A line that cannot be
run (not UTF-8, invalid JSON, no prompt, unknown agent, an id or a task seen
before) becomes an ``invalid`` record saying why (its ``line`` says where), and the other
lines still run.
"""

from __future__ import annotations

import codecs
import difflib
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import BinaryIO

import msgspec

from isoagent.parent.records.events import TaskRecord
from isoagent.protocol import AgentSpec

TaskId = str | int
MAX_PROMPT_BYTES = 8 << 20  # more than a model's context holds: a batch line, a stdin
HASH_PREFIX = "h-"  # of the id of a task that names none


class TaskLine(msgspec.Struct, forbid_unknown_fields=True):
    prompt: str
    id: TaskId | None = None
    agent: str | None = None


TASK_KEYS = ("prompt", "id", "agent")


@dataclass
class BatchTask:
    id: TaskId
    line: int
    prompt: str
    agent: AgentSpec
    digest: str = ""  # of what defines it (``task_hash``): its line's, to resume by


class _IdOnly(msgspec.Struct):
    id: TaskId | None = None


class _Invalid(Exception):
    def __init__(self, message: str, task_id: TaskId | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id


class LineTooLong(Exception):
    """A line too long to be a task: what is read is not a task file (``/dev/zero``)."""


def read_lines(stream: BinaryIO) -> Iterator[bytes]:
    """The lines of ``stream``; one longer than ``MAX_PROMPT_BYTES`` raises ``LineTooLong``
    (without reading on to its end, which may never come)."""
    number = 0
    while line := stream.readline(MAX_PROMPT_BYTES + 1):
        number += 1
        if len(line) > MAX_PROMPT_BYTES:
            raise LineTooLong(
                f"line {number} is longer than {MAX_PROMPT_BYTES >> 20} MiB: not a task"
            )
        yield line


def parse_tasks(
    lines: Iterable[bytes], agents: Mapping[str, AgentSpec], default_agent: str
) -> Iterator[BatchTask | TaskRecord]:
    """A BatchTask for each runnable line, an ``invalid`` TaskRecord for each bad one."""
    first_seen: dict[TaskId, int] = {}
    for number, raw in enumerate(lines, 1):
        if number == 1:
            raw = raw.removeprefix(codecs.BOM_UTF8)
        named: TaskId | None = None  # the line's own id
        task_id: TaskId | None = None
        try:
            text = _text(raw).strip()
            if not text:
                continue
            if text.startswith(("[", '"')) and is_json(text):
                kind = "array" if text.startswith("[") else "string"
                raise _Invalid(
                    f'a JSON {kind}, not a task: write {{"prompt": ...}}, or the prompt as '
                    "plain text"
                )
            if text.startswith("{"):
                fields = _decode(text)
                prompt, agent_name, named = fields.prompt, fields.agent or default_agent, fields.id
            else:
                prompt, agent_name = text, default_agent
            task_id = task_hash(agent_name, prompt) if named is None else named
            if (first := first_seen.get(task_id)) is not None:
                if named is None:
                    raise _Invalid(f"the same task as line {first} (give each an id to run both)")
                raise _Invalid(f"duplicate id {named!r} (first on line {first})")
            first_seen[task_id] = number
            if not prompt.strip():
                raise _Invalid("the prompt is empty")
            agent = agents.get(agent_name)
            if agent is None:
                raise _Invalid(unknown_agent(agent_name, agents))
        except _Invalid as exc:
            known = exc.task_id if task_id is None else task_id
            yield TaskRecord(
                _line_hash(raw) if known is None else known,
                "invalid",
                number,
                error=str(exc),
            )
            continue
        yield BatchTask(task_id, number, prompt, agent, task_hash(agent_name, prompt))


def task_hash(agent: str, prompt: str) -> str:
    """The id of a task that names none: the same task gets the same id in any batch."""
    return _hashed(msgspec.json.encode([agent, prompt]))


def _line_hash(raw: bytes) -> str:
    """The id of a line that is not a task and names no id."""
    return _hashed(raw.strip())


def _hashed(data: bytes) -> str:
    return HASH_PREFIX + hashlib.sha256(data).hexdigest()[:16]


def label(task_id: TaskId, line: int) -> str:
    """How progress lines name a task: by its id, or where it names none, by its line."""
    is_hash = isinstance(task_id, str) and task_id.startswith(HASH_PREFIX)
    return f"line {line}" if is_hash else f"task {task_id}"


def unknown_agent(name: str, agents: Mapping[str, AgentSpec]) -> str:
    """What a name that is no agent type is told: the closest one, if one is close (in any
    case: ``explore`` is ``Explore``), and every one."""
    by_case = {known.lower(): known for known in agents}
    close = difflib.get_close_matches(name.lower(), list(by_case), n=1, cutoff=0.7)
    hint = f"did you mean {by_case[close[0]]!r}? " if close else ""
    return f"unknown agent {name!r}; {hint}choose one of: {', '.join(agents)}"


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"byte 0x{raw[exc.start]:02x} at column {exc.start + 1}"
        readable = raw.decode("utf-8", errors="replace").strip()
        raise _Invalid(f"not UTF-8 text ({where})", _id_of(readable)) from None


def _id_of(text: str) -> TaskId | None:
    """The line's ``id``, if it is a JSON object that has a usable one."""
    try:
        return msgspec.json.decode(text, type=_IdOnly).id
    except msgspec.DecodeError:  # ValidationError too
        return None


def _decode(text: str) -> TaskLine:
    """The line's fields; when they are wrong, the error keeps the line's id if it has one."""
    try:
        return msgspec.json.decode(text, type=TaskLine)
    except msgspec.ValidationError as exc:
        unknown = _unknown_key(text)
        raise _Invalid(unknown or str(exc), _id_of(text)) from None
    except msgspec.DecodeError as exc:
        raise _Invalid(f"invalid JSON: {exc}") from None


def _unknown_key(text: str) -> str:
    """What is wrong with a line's keys, if one is not a task's ("" if none)."""
    keys = msgspec.json.decode(text, type=dict[str, object])
    for key in keys:
        if key not in TASK_KEYS:
            near = difflib.get_close_matches(key, TASK_KEYS, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            return f"unknown key {key!r}{hint}; a task has {', '.join(TASK_KEYS)}"
    return ""


def is_json(text: str | bytes) -> bool:
    try:
        msgspec.json.decode(text)
    except msgspec.DecodeError:
        return False
    return True
