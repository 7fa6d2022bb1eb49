"""The base tools, by name (Claude Code's): what an agent type's ``tools`` list refers to."""

from __future__ import annotations

from collections.abc import Iterable

from isoagent.child.agent.tools.base import Tool, ToolContext
from isoagent.child.agent.tools.bash import Bash
from isoagent.child.agent.tools.files import Edit, Read, Write
from isoagent.child.agent.tools.grep import Grep
from isoagent.child.agent.tools.search import Glob
from isoagent.child.agent.tools.todo import TodoWrite
from isoagent.child.agent.tools.web import WebFetch, WebSearch

TOOL_CLASSES: dict[str, type[Tool]] = {
    cls.name: cls for cls in (Bash, Read, Write, Edit, Glob, Grep, TodoWrite, WebFetch, WebSearch)
}


def make_tools(names: Iterable[str], ctx: ToolContext) -> list[Tool]:
    """One instance of each named tool, sharing ``ctx``; an unknown name is a ValueError."""
    tools = []
    for name in names:
        cls = TOOL_CLASSES.get(name)
        if cls is None:
            raise ValueError(f"unknown tool {name!r}; known tools: {', '.join(TOOL_CLASSES)}")
        tools.append(cls(ctx))
    return tools
