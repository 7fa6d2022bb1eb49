"""A run's events as Claude Code prints them with ``--output-format stream-json|json``.

Programs written for ``claude -p`` (and the claude-agent-sdk's ``parse_message``) read
these lines unchanged: ``system``/``init``; ``assistant`` and ``user`` messages with
``parent_tool_use_id`` (None for the parent, the ``Agent`` tool_use id for a child's);
``system`` ``task_started``/``task_progress``/``task_notification`` for children; with
``--include-partial-messages``, each streamed event of every model call (``stream_event``);
and the final ``result``. isoagent's own facts ride along in fields Claude Code does not use
(``run_dir``, ``status``, ``children``, ``pid``, ``transcript`` ...).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from isoagent.child.agent.builtin_agents import BASE_TOOLS, SEND_MESSAGE, TASK_TOOL
from isoagent.child.agent.tools.bash import REFUSED
from isoagent.child.agent.tools.task import DEFAULT_AGENT
from isoagent.parent.agent.permission_prompt import DENIED
from isoagent.parent.agent.task_tool import TASK_STATUS
from isoagent.parent.model.prices import cost_usd
from isoagent.parent.records.events import (
    ChildFinished,
    ChildProgress,
    ChildStarted,
    Event,
    MessageAdded,
    RunFinished,
    RunStarted,
)
from isoagent.protocol import Result, ThinkingBlock, ToolUseBlock, Usage

Message = dict[str, Any]

# The Claude Code release whose stream and control protocol isoagent speaks (the tests run
# that release's CLI beside isoagent); init reports it, as the SDK asks, next to isoagent's own.
CLAUDE_CODE_PROTOCOL = "2.1.330"
_SUBTYPES = {"ok": "success", "max_turns": "error_max_turns", "budget": "error_max_budget_usd"}
_TERMINAL = {"ok": "completed", "max_turns": "max_turns", "budget": "budget_exhausted"}


@dataclass
class _Child:
    tool_use_id: str | None
    model: str = ""
    usage: Usage = field(default_factory=Usage)


class ClaudeFormat:
    """Turns isoagent events into Claude Code messages; ``write`` gets each message.

    ``main_child``: the run has no parent agent (``isoagent task``), so the child's
    messages are the main conversation (``parent_tool_use_id`` None). ``tools``: the main
    agent's (default: the parent's full set); ``permission_mode``: the run's.
    """

    def __init__(
        self,
        write: Callable[[Message], None] | None,
        *,
        main_child: bool = False,
        tools: Sequence[str] | None = None,
        permission_mode: str = "default",
    ) -> None:
        self.write = write
        self.permission_mode = permission_mode
        self.main_child = main_child
        self.tools = [*BASE_TOOLS, TASK_TOOL] if tools is None else list(tools)
        if TASK_TOOL in self.tools and not main_child:  # the parent continues a child with it
            self.tools.insert(self.tools.index(TASK_TOOL) + 1, SEND_MESSAGE)
        self.session_id = ""
        self.model = ""
        self.stop_reason: str | None = None  # of the parent's last answer, for the result
        self.context_tokens = 0  # the parent's context after its last answer
        self._pending_tasks: list[ToolUseBlock] = []  # the parent's task calls not yet started
        self._nested_tasks: list[ToolUseBlock] = []  # and its children's (--max-depth)
        self._calls: dict[str, ToolUseBlock] = {}  # tool calls by id, for permission_denials
        self._denials: list[dict[str, Any]] = []  # commands their Bash(...) rules refused
        self._children: dict[str, _Child] = {}
        self._usage_by_model: dict[str, Usage] = {}
        # what earlier runs of the session cost: Claude Code's total_cost_usd is the session's
        self.cost_before = 0.0
        self.plugins: list[dict[str, str]] = []  # for init: the plugins loaded
        self.mcp_servers: list[dict[str, str]] = []  # for init: the MCP servers and status

    def __call__(self, event: Event) -> None:
        message = self.convert(event)
        if message is not None and self.write is not None:
            self.write(message)

    def stream_event(self, child: str, data: bytes) -> None:
        """One event of a streamed model call of ``child`` ("": the parent), its JSON as the
        API sent it: Claude Code's ``stream_event`` (``--include-partial-messages``)."""
        if self.write is not None:
            self.write(
                {
                    "type": "stream_event",
                    "uuid": str(uuid.uuid4()),
                    "session_id": self.session_id,
                    "event": msgspec.Raw(data),
                    "parent_tool_use_id": self._parent_of(child),
                }
            )

    def convert(self, event: Event) -> Message | None:
        """The Claude Code message for ``event`` (None: Claude Code shows nothing for it)."""
        if isinstance(event, RunStarted):
            return self._init(event)
        if isinstance(event, MessageAdded):
            return self._message(event)
        if isinstance(event, ChildStarted):
            child = self._child(event.child, event.description, event.prompt, event.agent)
            child.model = event.model
            return self._system(
                "task_started",
                task_id=event.child,
                tool_use_id=child.tool_use_id,
                description=event.description,
                subagent_type=event.agent,
                task_type="local_agent",
                prompt=event.prompt,
                model=event.model,
                pid=event.pid,
                transcript=event.transcript,
            )
        if isinstance(event, ChildProgress):
            child = self._child(event.child, event.description, "", event.agent)
            progress = event.progress
            return self._system(
                "task_progress",
                task_id=event.child,
                tool_use_id=child.tool_use_id,
                description=progress.detail or event.description,
                subagent_type=event.agent,
                usage=_task_usage(child.usage, progress.tool_calls, progress.elapsed),
                last_tool_name=progress.tool or None,
                progress=msgspec.to_builtins(progress),
            )
        if isinstance(event, ChildFinished):
            return self._notification(event)
        if isinstance(event, RunFinished):
            return self.result(event)
        return None

    # -- messages -------------------------------------------------------------

    def _init(self, event: RunStarted) -> Message:
        self.session_id = event.session_id or event.run_id
        self.model = event.model
        return self._system(
            "init",
            cwd=event.workdir,
            tools=self.tools,
            mcp_servers=self.mcp_servers,
            model=event.model,
            permissionMode=self.permission_mode,
            slash_commands=[],
            apiKeySource="ANTHROPIC_API_KEY",
            output_style="default",
            agents=event.agents,
            skills=[],
            plugins=self.plugins,
            claude_code_version=CLAUDE_CODE_PROTOCOL,
            isoagent_version=_version(),
            run_id=event.run_id,
            run_dir=event.run_dir,
        )

    def _message(self, event: MessageAdded) -> Message | None:
        content = [_block(block) for block in event.content]
        parent = self._parent_of(event.child)
        if event.role == "user":
            if not any(block["type"] == "tool_result" for block in content):
                return None  # the prompt itself: Claude Code does not echo it
            self._note_denials(event.content)
            return self._stamp(
                {
                    "type": "user",
                    "message": {"role": "user", "content": content},
                    "parent_tool_use_id": parent,
                },
                event.child,
            )
        model = self._children[event.child].model if event.child in self._children else ""
        model = model or self.model
        if event.model and event.model != model:  # --fallback-model answered
            if self.write is not None:
                self.write(
                    self._system(
                        "model_fallback", trigger="overloaded", original_model=model,
                        fallback_model=event.model,
                    )
                )  # fmt: skip
            model = event.model
        usage = event.usage or Usage()
        self._count(event.child, model, usage)
        self._calls.update((b.id, b) for b in event.content if isinstance(b, ToolUseBlock))
        tasks = [b for b in event.content if isinstance(b, ToolUseBlock) and b.name == TASK_TOOL]
        if not event.child:
            self.stop_reason = event.stop_reason or None
            self._pending_tasks += tasks
        else:
            self._nested_tasks += tasks
        return self._stamp(
            {
                "type": "assistant",
                "message": {
                    "id": event.id or f"msg_{uuid.uuid4().hex[:24]}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": content,
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": _usage(usage),
                },
                "parent_tool_use_id": parent,
            },
            event.child,
        )

    def _notification(self, event: ChildFinished) -> Message:
        child = self._child(event.child, event.description, "", event.agent)
        result = event.result
        return self._system(
            "task_notification",
            task_id=event.child,
            tool_use_id=child.tool_use_id,
            status=TASK_STATUS.get(result.status, "failed"),
            output_file=event.transcript,
            summary=result.summary,
            usage=_task_usage(result.usage, result.tool_calls, result.duration),
            subagent_type=event.agent,
            result=msgspec.to_builtins(result),
            pid=event.pid,
            exit_code=event.exit_code,
        )

    def result(self, final: RunFinished) -> Message:
        """Claude Code's final ``result`` object, with isoagent's run facts added."""
        result = final.result
        is_error = result.status != "ok"
        message: Message = {
            "type": "result",
            "subtype": _SUBTYPES.get(result.status, "error_during_execution"),
            "is_error": is_error,
            "duration_ms": round(result.duration * 1000),
            "duration_api_ms": round(final.api_seconds * 1000),
            "num_turns": result.turns,
            "result": result.summary,
            "stop_reason": self.stop_reason,
            "session_id": self.session_id,
            "total_cost_usd": self.cost_before + self.run_cost,
            "usage": _usage(result.usage),
            "modelUsage": {
                model: {
                    "inputTokens": usage.input_tokens,
                    "outputTokens": usage.output_tokens,
                    "cacheReadInputTokens": usage.cache_read_input_tokens,
                    "cacheCreationInputTokens": usage.cache_creation_input_tokens,
                    "webSearchRequests": 0,
                    "costUSD": cost_usd(model, usage),
                }
                for model, usage in self._usage_by_model.items()
            },
            "permission_denials": self._denials,
            "terminal_reason": _TERMINAL.get(result.status, "error"),
            "uuid": str(uuid.uuid4()),
        }
        if final.structured_output is not None:
            message["structured_output"] = final.structured_output
        if final.structured_output_failed:
            message["subtype"] = "error_max_structured_output_retries"
            message["terminal_reason"] = "structured_output_retry_exhausted"
        if is_error:
            message["errors"] = [_error_text(result)]
        # isoagent's own facts
        message["status"] = result.status
        message["error"] = result.error
        message["tool_calls"] = result.tool_calls
        message["retries"] = final.retries  # model-call attempts the gateway retried
        message["run_dir"] = final.run_dir
        message["children"] = msgspec.to_builtins(final.children)
        if final.trace_id:
            message["trace_id"] = final.trace_id
        return message

    @property
    def run_cost(self) -> float:
        """What this run's model calls cost, in US dollars."""
        return sum(cost_usd(model, usage) for model, usage in self._usage_by_model.items())

    # -- helpers --------------------------------------------------------------

    def _system(self, subtype: str, **fields: Any) -> Message:
        return {
            "type": "system",
            "subtype": subtype,
            **fields,
            "uuid": str(uuid.uuid4()),
            "session_id": self.session_id,
        }

    def _stamp(self, message: Message, child: str) -> Message:
        message["session_id"] = self.session_id
        message["uuid"] = str(uuid.uuid4())
        if child:
            message["child"] = child
        return message

    def _child(self, child: str, description: str, prompt: str, agent: str) -> _Child:
        """The record of ``child``, made at its first event by claiming the ``Agent`` call it
        answers: a child's with the same description, prompt and type (a child's child),
        else the parent's that has them, else the parent's oldest."""
        if child not in self._children:
            tool_use_id = None
            wanted = {"description": description, "prompt": prompt, "subagent_type": agent}
            nested = next((b for b in self._nested_tasks if _calls_for(b.input, wanted)), None)
            if nested is not None:
                self._nested_tasks.remove(nested)
                tool_use_id = nested.id
            elif self._pending_tasks and not self.main_child:
                match = next(
                    (b for b in self._pending_tasks if _calls_for(b.input, wanted)),
                    self._pending_tasks[0],
                )
                self._pending_tasks.remove(match)
                tool_use_id = match.id
            self._children[child] = _Child(tool_use_id)
        return self._children[child]

    def _parent_of(self, child: str) -> str | None:
        if not child or self.main_child:
            return None
        return self._children[child].tool_use_id if child in self._children else None

    def _note_denials(self, content: list[Any]) -> None:
        """Claude Code's ``permission_denials``: the Bash calls whose rules refused them,
        and the calls the SDK's ``can_use_tool`` refused."""
        for block in content:
            call = self._calls.get(getattr(block, "tool_use_id", ""))
            if call is None or not block.is_error or not isinstance(block.content, str):
                continue
            if block.content.startswith(DENIED) or (
                call.name == "Bash" and block.content.startswith(REFUSED)
            ):
                self._denials.append(
                    {"tool_name": call.name, "tool_use_id": call.id, "tool_input": call.input}
                )

    def _count(self, child: str, model: str, usage: Usage) -> None:
        if not child:  # what the parent's next request holds, as the API counts it
            self.context_tokens = usage.total
        if child in self._children:
            self._children[child].usage = self._children[child].usage + usage
        self._usage_by_model[model] = self._usage_by_model.get(model, Usage()) + usage


def _calls_for(task_input: dict[str, Any], wanted: dict[str, str]) -> bool:
    """Whether an ``Agent`` call's input asks for this child (``run_in_background`` aside)."""
    asked = {"subagent_type": DEFAULT_AGENT, **task_input}
    return all(asked.get(key) == value for key, value in wanted.items())


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("isoagent")
    except PackageNotFoundError:
        return ""


def _block(block: msgspec.Struct) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(block)
    if isinstance(block, ThinkingBlock):
        data.setdefault("signature", "")  # Claude Code always sends one
    return data


def _usage(usage: Usage) -> dict[str, int]:
    """The Messages API's usage object (Usage has its field names)."""
    return msgspec.to_builtins(usage)  # type: ignore[no-any-return]


def _task_usage(usage: Usage, tool_uses: int, seconds: float) -> dict[str, int]:
    return {
        "total_tokens": usage.total,
        "tool_uses": tool_uses,
        "duration_ms": round(seconds * 1000),
    }


def _error_text(result: Result) -> str:
    if result.status == "max_turns":
        return f"Reached maximum number of turns ({result.turns})"
    return result.error or result.status
