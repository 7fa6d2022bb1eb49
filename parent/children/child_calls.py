"""What a child asks of the parent, frame by frame, and the parent's answers.

A child is untrusted: a prompt-injected one can write any frame. This is the one place
where what a frame claims meets what the child's Task granted: each ``ModelCall``,
``McpCall``, ``HookCall`` and ``TaskCall`` is checked against the grants and the parent's
own record of the conversation before the parent acts on it, and answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec

from isoagent.child.agent.loop import text_of
from isoagent.parent.children.child_hooks import ChildHooks, HookLedger, Subagent
from isoagent.parent.children.grants import Grants
from isoagent.parent.children.launchers import ChildFailed
from isoagent.parent.children.process import ChildProcess
from isoagent.parent.claude_code.mcp_servers import McpServers
from isoagent.parent.model.conversation import ConversationRecorder
from isoagent.parent.model.gateway import Gateway
from isoagent.parent.records.events import ChildProgress, Sink
from isoagent.parent.records.figures import plural, tokens
from isoagent.parent.records.terminal_text import warn
from isoagent.protocol import (
    HookCall,
    HookReply,
    McpCall,
    McpReply,
    ModelCall,
    ModelError,
    ModelReply,
    Progress,
    Result,
    TaskCall,
    TaskReply,
    Usage,
)

ChildFrameIn = ModelCall | McpCall | HookCall | TaskCall | Progress | Result


@dataclass
class CallContext:
    """What a child's calls reach: the session's gateway, hooks and MCP servers, and its
    ``Agent`` calls' way to the supervisor."""

    gateway: Gateway
    hooks: ChildHooks | None
    mcp_servers: McpServers
    sink: Sink
    delegate: Callable[[TaskCall], Awaitable[TaskReply]]


class ChildCalls:
    """One child's frames after its Hello, each acted on and answered; what the parent
    knows of its conversation (usage, retries, its latest words, its latest progress)."""

    def __init__(
        self,
        context: CallContext,
        child: str,
        agent: str,
        description: str,
        recorder: ConversationRecorder,
        subagent: Subagent,
    ) -> None:
        self.context = context
        self.child = child
        self.agent = agent
        self.description = description
        self.recorder = recorder
        self.subagent = subagent
        # its tokens and turns, as the gateway relayed its answers: its Result's say is not
        # taken (a child is untrusted), only compared
        self.usage = Usage()
        self.turns = 0
        self.retries = 0  # of its model calls, by the gateway
        self.last_text = ""  # the child's latest words: its summary so far, if it fails
        self.answered = False  # its last model answer asked for no tool: its Result is next
        self.last_progress: Progress | None = None
        self.cancelled = False  # the parent asked it to stop: no more tokens for it
        self.grants: Grants | None = None  # what its Task granted
        self.ledger: HookLedger | None = None  # what it asked the hooks, with a plan
        self._delegations: set[asyncio.Future[None]] = set()  # its Agent calls under way

    def granted(self, grants: Grants, ledger: HookLedger | None) -> None:
        """What the Task it is sent grants: its calls are held to it."""
        self.grants = grants
        self.ledger = ledger

    def accounted(self, result: Result) -> Result:
        """``result`` with the tokens and turns the gateway relayed for this child; where
        the child said otherwise, a line says so (once: it ends here)."""
        if (result.usage, result.turns) != (self.usage, self.turns):
            warn(
                f"warning: child {self.child} said it used {tokens(result.usage.total)} in "
                f"{plural(result.turns, 'turn')}; the gateway relayed {tokens(self.usage.total)} "
                f"in {plural(self.turns, 'turn')}, which its records keep"
            )
        return msgspec.structs.replace(result, usage=self.usage, turns=self.turns)

    async def talk(self, process: ChildProcess) -> Result:
        """Answer its frames until its Result."""
        try:
            while True:
                frame = await self.answer(process)
                if isinstance(frame, Result):
                    return frame
        finally:  # a child's child ends with it
            for delegation in self._delegations:
                delegation.cancel()
            await asyncio.gather(*self._delegations, return_exceptions=True)

    async def answer(self, process: ChildProcess) -> ChildFrameIn:
        """Take the next frame and act on it: answer a model call, forward progress."""
        frame = await process.frames.next()
        if frame is None:
            raise ChildFailed("exited before sending its Result")
        match frame:
            case ModelCall():
                await process.answer(await self._model_call(process, frame))
            case McpCall():
                answer = await self._call_sdk_tool(frame)
                await process.answer(answer)
            case TaskCall():  # its frames are read on while its child runs
                await self._check_delegation(process, frame)
                delegation = asyncio.ensure_future(self._delegate(process, frame))
                self._delegations.add(delegation)
                delegation.add_done_callback(self._delegations.discard)
            case HookCall():
                decided = await self._ask_hooks(frame)
                await process.answer(decided)
            case Progress():
                self.last_progress = frame
                event = ChildProgress(self.child, self.agent, self.description, frame)
                self.context.sink(event)
            case Result():
                if self.ledger is not None and (broke := self.ledger.refusal(None, self.cancelled)):
                    raise ChildFailed(broke, "error")
            case _:
                raise ChildFailed(f"sent an unexpected {type(frame).__name__} frame")
        return frame

    async def _model_call(self, process: ChildProcess, call: ModelCall) -> ModelReply:
        assert self.grants is not None
        if refused := self.grants.refusal(call):  # a child is untrusted
            error = ModelError("bad_request", f"refused by the parent: {refused}")
            await process.answer(ModelReply(call.turn, error=error))
            raise ChildFailed(f"sent a model call its Task does not allow: {refused}", "error")
        if self.ledger is not None and (broke := self.ledger.refusal(call.messages)):
            raise ChildFailed(broke, "error")
        if said := self._said_for_the_model(call):
            raise ChildFailed(said, "error")
        self.recorder.before(call)
        if self.cancelled:  # it asked before it saw the Cancel: no more tokens for it
            reply = ModelReply(call.turn, error=ModelError("cancelled", "cancelled"))
        else:
            reply = await self.context.gateway.call(call)
        self.recorder.after(call, reply)
        self.usage = self.usage + reply.usage
        self.turns += reply.error is None
        self.retries += reply.retries
        self.last_text = text_of(reply.content) or self.last_text
        self.answered = reply.error is None and reply.stop_reason != "tool_use"
        if self.ledger is not None and reply.error is None:
            self.ledger.answered(call, reply)
        return reply

    def _said_for_the_model(self, call: ModelCall) -> str:
        """Why ``call`` is refused for what it adds to the conversation ("": it is not): a
        child reports its prompt and its tools' results; the model's answers are those the
        gateway relayed (the parent recorded each), never words a child wrote as its
        model's, which would go on into ``send_message``'s continuation and ``logs``."""
        seen = self.recorder.seen
        for number, message in enumerate(call.messages[seen:], seen + 1):
            if message.role == "assistant":
                return f"wrote message {number} as its model's answer, which the model never gave"
        return ""

    async def _check_delegation(self, process: ChildProcess, call: TaskCall) -> None:
        """An ``Agent`` call its Task grants: refused, and the child ended, if not."""
        assert self.grants is not None
        if refused := self.grants.delegation_refusal(call):
            await process.answer(TaskReply(call.id, f"refused by the parent: {refused}", True))
            raise ChildFailed(refused, "error")

    async def _delegate(self, process: ChildProcess, call: TaskCall) -> None:
        reply = await self.context.delegate(call)
        await process.answer(reply)

    async def _call_sdk_tool(self, call: McpCall) -> McpReply:
        """A tool of an SDK's in-process server, for a child whose Task gives it (a child
        is untrusted), called through the SDK."""
        assert self.grants is not None
        if refused := self.grants.mcp_refusal(call):
            raise ChildFailed(f"called an MCP tool its Task does not give it: {refused}", "error")
        relay = self.context.mcp_servers.relay
        assert relay is not None  # a Task holds an SDK server's tools only once it was listed
        text, is_error = await asyncio.to_thread(relay, call.server, call.tool, call.arguments)
        return McpReply(call.id, text, is_error)

    async def _ask_hooks(self, call: HookCall) -> HookReply:
        """The session's hooks on one of the child's steps, one its Task's plan names (a
        child is untrusted)."""
        assert self.grants is not None
        hooks, ledger = self.context.hooks, self.ledger
        if hooks is None or ledger is None or not ledger.plan.asks(call.event, call.tool):
            what = f"{call.event} of {call.tool}" if call.tool else call.event
            raise ChildFailed(f"asked the hooks about what its Task does not: {what}", "error")
        asked, refused = ledger.claim(call, self.last_text)
        if refused:
            raise ChildFailed(refused, "error")
        decided = await asyncio.to_thread(hooks.answer, asked, self.subagent)
        ledger.heard(asked, decided)
        return decided
