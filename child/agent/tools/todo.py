"""``TodoWrite``: Claude Code's task list, one the agent keeps for itself.

The list lives in the agent's own process and ends with it; nothing outside reads it.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from isoagent.child.agent.tools.base import Tool, ToolContext


class Todo(msgspec.Struct, forbid_unknown_fields=True):
    content: Annotated[str, msgspec.Meta(min_length=1, description="What to do.")]
    status: Literal["pending", "in_progress", "completed"]
    activeForm: Annotated[
        str, msgspec.Meta(description="The task in present continuous form ('Running tests').")
    ] = ""


class TodoInput(msgspec.Struct, forbid_unknown_fields=True):
    todos: Annotated[list[Todo], msgspec.Meta(description="The whole updated task list.")]


_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


class TodoWrite(Tool[TodoInput]):
    name = "TodoWrite"
    description = (
        "Keep a task list for a multi-step job: send the whole updated list each time "
        "(content, status pending|in_progress|completed). Mark a task in_progress before "
        "starting it and completed as soon as it is done. The list is yours alone."
    )
    Input = TodoInput

    def __init__(self, ctx: ToolContext) -> None:
        super().__init__(ctx)
        self.todos: list[Todo] = []

    def execute(self, inp: TodoInput) -> str:
        self.todos = list(inp.todos)
        if not self.todos:
            return "The task list is empty."
        lines = [f"{_MARKS[t.status]} {t.content}" for t in self.todos]
        return "Task list updated:\n" + "\n".join(lines)
