"""The agent loop, written once: the child runs it, and so does the parent (with ``Agent``).

A loop is a model, a list of tools and a fresh message list. Each turn it asks
the model, runs the tool calls the model made, and feeds the results back,
until the model answers without a tool call or a limit ends it. Limits are
exceptions that carry their exit status and message (as in mini-swe-agent).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from isoagent.child.agent.spans import NoSpans, Spans
from isoagent.child.agent.tools.base import Tool, ToolOutput
from isoagent.child.agent.truncate import truncate
from isoagent.protocol import (
    AgentSpec,
    Block,
    CallOptions,
    HookCall,
    HookPlan,
    HookReply,
    Message,
    ModelCall,
    ModelReply,
    Progress,
    ProgressEvent,
    Result,
    SpanValue,
    Status,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from isoagent.protocol.frames import DEFAULT_MAX_TOKENS


class Model(Protocol):
    """Anything that answers a model turn: the gateway over a pipe, the SDK, a cassette."""

    def complete(self, call: ModelCall) -> ModelReply: ...


class Notices(Protocol):
    """What comes for the model between its turns, as text for its next user turn: the
    parent's background children's ends (``parent/agent/task_tool.py``)."""

    def arrived(self) -> list[str]:
        """Those that came, without waiting."""
        ...

    def awaited(self, is_cancelled: Callable[[], bool]) -> list[str] | None:
        """The next ones, waiting while any is still to come; [] when none is, None when
        ``is_cancelled`` turned true while it waited."""
        ...


# stop reasons that mean the reply is incomplete
CUT_OFF = {
    "max_tokens": "the model's reply was cut off at max_tokens ({}) before it finished",
    "model_context_window_exceeded": "the conversation outgrew the model's context window",
}


class LoopEnd(Exception):
    """Ends the loop early with a status; the message says why, for the caller."""

    status: Status = "error"


class MaxTurnsReached(LoopEnd):
    status = "max_turns"


class ModelFailed(LoopEnd):
    def __init__(self, message: str, status: Status = "error") -> None:
        super().__init__(message)
        self.status = status


class Cancelled(LoopEnd):
    status = "cancelled"


class HookStopped(LoopEnd):
    """A hook said ``continue: false``: the agent ends here."""

    status = "cancelled"


@dataclass(frozen=True)
class Hooks:
    """Claude Code's hooks as an agent meets them: which of its steps to ask about
    (``plan``) and who answers (the parent's hooks: directly in the parent, over the pipe
    in a child)."""

    plan: HookPlan
    ask: Callable[[HookCall], HookReply]

    def check(self, call: HookCall) -> HookReply:
        reply = self.ask(call)
        if reply.stop is not None:
            raise HookStopped(f"stopped by a {call.event} hook: {reply.stop or 'no reason'}")
        return reply


class Agent:
    def __init__(
        self,
        model: Model,
        tools: Iterable[Tool],
        *,
        system: str,
        model_name: str,
        agent_name: str = "",
        max_turns: int = 0,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        output_cap: int = 30_000,
        max_parallel: int = 1,
        on_progress: Callable[[Progress], None] | None = None,
        is_cancelled: Callable[[], bool] = lambda: False,
        call_options: CallOptions | None = None,
        notices: Notices | None = None,
        spans: Spans | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        self.model = model
        self.notices = notices
        self.spans = spans or NoSpans()
        self.hooks = hooks
        self.call_options = call_options
        self.tools = {tool.name: tool for tool in tools}
        self.system = system
        self.model_name = model_name
        self.agent_name = agent_name
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.output_cap = output_cap
        self.max_parallel = max_parallel
        self.on_progress = on_progress or (lambda _: None)
        self.is_cancelled = is_cancelled
        self.messages: list[Message] = []
        self.turns = 0
        self.tool_calls = 0
        self.usage = Usage()
        self.started = time.monotonic()

    def run(self, prompt: str, history: Sequence[Message] = ()) -> Result:
        """Run to the end, after ``history`` (an earlier conversation, ended by the model's
        answer); never raises for a limit, a model error or a cancel."""
        what: dict[str, SpanValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": self.agent_name,
        }
        with self.spans.span(f"invoke_agent {self.agent_name}", what) as span:
            result = self._run(prompt, history)
            span.attributes |= {
                "isoagent.status": result.status,
                "isoagent.turns": result.turns,
                "isoagent.tool_calls": result.tool_calls,
            }
            if result.status != "ok":
                span.error = result.error or result.status
        return result

    def _run(self, prompt: str, history: Sequence[Message]) -> Result:
        self.messages = [*history, Message("user", [TextBlock(prompt)])]
        self.started = time.monotonic()
        try:
            summary = self._loop()
            status: Status = "ok"
            error = ""
        except LoopEnd as end:
            status, error = end.status, str(end)
            summary = self.last_text()
        return Result(
            summary=summary,
            status=status,
            turns=self.turns,
            tool_calls=self.tool_calls,
            usage=self.usage,
            duration=round(time.monotonic() - self.started, 3),
            error=error,
        )

    def last_text(self) -> str:
        for message in reversed(self.messages):
            if message.role == "assistant" and (text := text_of(message.content)):
                return text
        return ""

    def _loop(self) -> str:
        specs = [tool.spec for tool in self.tools.values()]
        stopped_before = False  # a Stop hook made it go on
        while True:
            if self.is_cancelled():
                raise Cancelled("cancelled")
            if self.max_turns and self.turns >= self.max_turns:
                raise MaxTurnsReached(f"stopped after reaching the turn limit ({self.max_turns})")
            if self.notices is not None and self.messages[-1].role == "user":
                self.messages[-1].content += [TextBlock(n) for n in self.notices.arrived()]
            call = ModelCall(
                turn=self.turns,
                model=self.model_name,
                max_tokens=self.max_tokens,
                system=self.system,
                messages=self.messages,
                tools=specs,
                agent=self.agent_name,
                options=self.call_options,
            )
            reply = self.model.complete(call)
            if reply.error is not None:
                ends: dict[str, Status] = {"budget": "budget", "cancelled": "cancelled"}
                status = ends.get(reply.error.kind, "error")
                raise ModelFailed(f"model call failed: {reply.error.message}", status)
            self.turns += 1
            self.usage = self.usage + reply.usage
            content = reply.content or [TextBlock("(empty response)")]  # the API rejects empty text
            self.messages.append(Message("assistant", content))
            uses = [b for b in content if isinstance(b, ToolUseBlock)]
            self._progress("turn")
            if reply.stop_reason in CUT_OFF:  # a tool call in it may be cut in half too
                raise ModelFailed(CUT_OFF[reply.stop_reason].format(self.max_tokens))
            if reply.stop_reason == "pause_turn":  # a long server-tool turn: send it back
                continue
            if not uses:
                # a background child still to be heard from: its end is the next user turn,
                # as in Claude Code; then the Stop hooks may make it go on
                waited = self.notices.awaited(self.is_cancelled) if self.notices else []
                if waited is None:
                    raise Cancelled("cancelled while background children ran")
                if waited:
                    self.messages.append(Message("user", [TextBlock(n) for n in waited]))
                    continue
                feedback = self._stop_feedback(stopped_before)
                if feedback is None:
                    return self.last_text()
                stopped_before = True
                self.messages.append(Message("user", [TextBlock(feedback)]))
                continue
            self.messages.append(Message("user", self._run_tools(uses)))

    def _stop_feedback(self, again: bool) -> str | None:
        """What a Stop hook says the agent must go on with (None: it may end); ``again``: a
        Stop hook made it go on before."""
        if self.hooks is None or not self.hooks.plan.asks("Stop"):
            return None
        verdict = self.hooks.check(HookCall(0, "Stop", output=self.last_text(), again=again))
        return f"Stop hook feedback:\n{verdict.reason or 'go on'}" if verdict.block else None

    def _run_tools(self, uses: list[ToolUseBlock]) -> list[Block]:
        """Run one turn's tool calls; runs of parallel-safe calls go concurrently."""
        results: list[Block] = []
        batch: list[ToolUseBlock] = []
        for use in uses:
            tool = self.tools.get(use.name)
            if tool is not None and tool.parallel_safe and self.max_parallel > 1:
                batch.append(use)
                continue
            results += self._run_batch(batch)
            batch = []
            results.append(self._run_one(use))
        return results + self._run_batch(batch)

    def _run_batch(self, uses: list[ToolUseBlock]) -> list[ToolResultBlock]:
        if len(uses) <= 1:
            return [self._run_one(use) for use in uses]
        from concurrent.futures import ThreadPoolExecutor  # only the parent runs tools in parallel

        # each call in a copy of this thread's context: its span is under this turn's
        contexts = [contextvars.copy_context() for _ in uses]
        with ThreadPoolExecutor(min(self.max_parallel, len(uses))) as pool:
            return list(pool.map(lambda ctx, use: ctx.run(self._run_one, use), contexts, uses))

    def _run_one(self, use: ToolUseBlock) -> ToolResultBlock:
        if self.is_cancelled():
            raise Cancelled("cancelled")
        tool = self.tools.get(use.name)
        self.tool_calls += 1
        self._progress("tool_start", use.name, _describe(use))
        what: dict[str, SpanValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": use.name,
            "gen_ai.tool.call.id": use.id,
        }
        with self.spans.span(f"execute_tool {use.name}", what) as span:
            if tool is None:
                output = ToolOutput(f"unknown tool {use.name!r}", is_error=True)
            else:
                output = self._run_tool(tool, use)
            if output.is_error:  # what it said may hold what telemetry should not carry
                span.error = "the tool answered with an error"
        self._progress("tool_end", use.name, "error" if output.is_error else "")
        text = as_read(output.text, self.output_cap)
        return ToolResultBlock(use.id, text or "(no output)", output.is_error)

    def _run_tool(self, tool: Tool, use: ToolUseBlock) -> ToolOutput:
        """``tool``'s run, between the hooks that its plan names."""
        hooks = self.hooks
        if hooks is None:
            return tool.run(use.input)
        args, notes = use.input, []
        if hooks.plan.asks("PreToolUse", use.name):
            before = hooks.check(HookCall(0, "PreToolUse", use.name, use.id, args))
            if before.block:
                return ToolOutput(before.reason, is_error=True)
            args = before.input if before.input is not None else args
            notes.append(before.context)
        output = tool.run(args)
        if hooks.plan.asks("PostToolUse", use.name):  # the output as the model would read it
            seen = as_read(output.text, self.output_cap)
            after = hooks.check(
                HookCall(0, "PostToolUse", use.name, use.id, args, seen, output.is_error)
            )
            if after.output is not None:
                output = ToolOutput(after.output, output.is_error)
            notes += [after.reason if after.block else "", after.context]
        if any(notes):
            output = ToolOutput("\n\n".join([output.text, *filter(None, notes)]), output.is_error)
        return output

    def _progress(self, event: ProgressEvent, tool: str = "", detail: str = "") -> None:
        self.on_progress(
            Progress(
                event=event,
                turns=self.turns,
                tool_calls=self.tool_calls,
                elapsed=round(time.monotonic() - self.started, 3),
                tool=tool,
                detail=detail,
            )
        )


def agent_options(agent: AgentSpec) -> CallOptions | None:
    """What an agent type's model calls add to the request: its effort, if it has one."""
    return CallOptions(effort=agent.effort) if agent.effort else None


def text_of(content: Iterable[Block]) -> str:
    """The text blocks of a message, joined: what a person would call its words."""
    return "\n".join(b.text for b in content if isinstance(b, TextBlock)).strip()


def as_read(output: str, cap: int) -> str:
    """A tool's output as its model reads it: valid UTF-8, cut to ``cap``."""
    return truncate(valid_utf8(output), cap)


def valid_utf8(text: str) -> str:
    """Lone surrogates (a file name that is not UTF-8) become U+FFFD: frames and the API
    carry only valid UTF-8."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate that is not an escaped byte
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _describe(use: ToolUseBlock) -> str:
    """A short one-line hint of what a tool call does, for progress displays."""
    for key in ("command", "description", "file_path", "path", "pattern", "url"):
        value = use.input.get(key)
        if isinstance(value, str) and value:
            line = value.splitlines()[0] if value.strip() else value
            return line[:80]
    return ""
