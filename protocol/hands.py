"""Frames between the parent agent and its hands (``python -m isoagent.child.hands``): the
process that runs the parent's file tools under a writing child's sandbox.

Length-prefixed as a child's frames are (``framing``). The hands says ``Ready`` once it is
confined (or why it could not be); then each ``ToolRun`` gets its ``ToolDone``, in order.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Ready(msgspec.Struct, tag=True, omit_defaults=True):
    """Confined and listening; ``error``: it is not, and why (it exits)."""

    error: str = ""


class ToolRun(msgspec.Struct, tag=True):
    """Run one tool call: the tool's name and the model's input, as the model gave it."""

    id: int
    tool: str
    input: dict[str, Any]


class ToolDone(msgspec.Struct, tag=True, omit_defaults=True):
    """A tool call's output, as ``Tool.run`` returned it."""

    id: int
    text: str
    is_error: bool = False


ToHands = ToolRun
FromHands = Ready | ToolDone
