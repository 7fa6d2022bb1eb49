"""Scripted conversations for the in-test server, shared by several test files."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.messages_server import Reply, Request, text_reply, tool_reply


def delegating(child: list[Reply]) -> Callable[[Request], Reply]:
    """The parent delegates once and answers with what its tool result said; the child
    plays ``child`` turn by turn (its last reply repeats)."""

    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn == 0:
                return tool_reply(
                    "Agent",
                    {"description": "risky", "prompt": "do it", "subagent_type": "general-purpose"},
                )
            result = req.tool_results[0]
            return text_reply(f"error={result.get('is_error', False)} :: {result['content']}")
        return child[min(req.turn, len(child) - 1)]

    return handler


def child_runs(agent: str, command: str) -> Callable[[Request], Reply]:
    """The parent delegates to ``agent``, whose one bash call's output becomes the answer."""

    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn == 0:
                return tool_reply(
                    "Agent", {"description": "try", "prompt": "try", "subagent_type": agent}
                )
            return text_reply(req.tool_results[0]["content"])
        if req.turn == 0:
            return tool_reply("Bash", {"command": command})
        return text_reply("CHILD SAW: " + req.tool_results[0]["content"])

    return handler
