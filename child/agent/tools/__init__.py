"""The base tools, by name: what an agent type's ``tools`` list refers to."""

from __future__ import annotations

from collections.abc import Iterable

from isoagent.child.agent.tools.base import Tool, ToolContext
from isoagent.child.agent.tools.bash import Bash
from isoagent.child.agent.tools.files import EditFile, ReadFile, WriteFile
from isoagent.child.agent.tools.search import Glob, Grep
from isoagent.child.agent.tools.todo import TodoWrite
from isoagent.child.agent.tools.web import WebFetch, WebSearch

TOOL_CLASSES: dict[str, type[Tool]] = {
    cls.name: cls
    for cls in (Bash, ReadFile, WriteFile, EditFile, Glob, Grep, TodoWrite, WebFetch, WebSearch)
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
