"""What every tool is: a spec the model sees, a typed input, and ``run``."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, cast

import msgspec

from isoagent.child.agent.process_tree import (
    SPARED,
    TAG_VARIABLE,
    end_descendants,
    reap_orphans,
    signal_processes,
)
from isoagent.protocol import Limits, SandboxPolicy, ToolSpec

I = TypeVar("I", bound=msgspec.Struct)


class ToolError(Exception):
    """A failure the model should read: its message becomes an error tool result."""


@dataclass
class ToolOutput:
    text: str
    is_error: bool = False


@dataclass
class ToolContext:
    """What tools share within one agent: where they work and how to stop them."""

    workdir: Path
    limits: Limits = field(default_factory=Limits)
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)  # what the kernel allows
    cancelled: threading.Event = field(default_factory=threading.Event)
    # process-group ids of running commands, so a cancel can end them
    process_groups: set[int] = field(default_factory=set)
    # the commands' environment (None: this process's own); it carries the tag below
    env: dict[str, str] | None = None
    # a child agent: every process below it is one of its commands' (see end_commands)
    owns_descendants: bool = False
    # the agent's Bash(...) rules (see bash_rules): commands allowed (none: any) and denied
    bash_allow: list[str] = field(default_factory=list)
    bash_deny: list[str] = field(default_factory=list)
    # folders the tools may use besides the workspace (--add-dir), absolute
    add_dirs: tuple[Path, ...] = ()
    # what runs each bash command (the parent's: confine_command, a writing child's sandbox)
    command_prefix: tuple[str, ...] = ()

    def end_commands(self) -> None:
        """SIGKILL every running command's process group, and what a command started and
        left running: in a child agent (a subreaper, whose orphans stay its descendants)
        every descendant, whatever session or environment it gave itself; in the parent,
        every process carrying the commands' tag."""
        if self.owns_descendants:
            signal_processes(signal.SIGKILL, groups=list(self.process_groups))
            end_descendants(spare=SPARED)
            return
        tag = (os.environ if self.env is None else self.env).get(TAG_VARIABLE, "")
        signal_processes(signal.SIGKILL, groups=list(self.process_groups), tag=tag)

    def reap_orphans(self) -> None:
        """In a child agent, between commands: reap the orphans its commands left, ended
        (the running commands' own processes are waited for by their tools)."""
        if self.owns_descendants:
            reap_orphans(keep={*self.process_groups, *SPARED})


class Tool(Generic[I]):
    """Base class: subclasses set ``name``, ``description``, ``Input`` and ``execute``.

    ``Input`` is a msgspec Struct; its JSON schema is what the model is shown and
    ``msgspec.convert`` validates the model's arguments against it.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Input: ClassVar[type[msgspec.Struct]]
    parallel_safe: ClassVar[bool] = False

    def __init__(self, ctx: ToolContext) -> None:
        self.ctx = ctx

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, input_schema(self.Input))

    def run(self, args: dict[str, Any]) -> ToolOutput:
        try:
            inp = cast(I, msgspec.convert(args, type=self.Input))  # Input is I's class
        except msgspec.ValidationError as exc:
            return ToolOutput(f"invalid input for {self.name}: {exc}", is_error=True)
        try:
            return ToolOutput(self.execute(inp))
        except ToolError as exc:
            return ToolOutput(str(exc), is_error=True)
        except Exception as exc:  # a tool's bug must not end the agent: the model reads it
            return ToolOutput(f"{self.name} failed: {type(exc).__name__}: {exc}", is_error=True)

    def execute(self, inp: I) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


class ToolWrapper(Tool[Any]):
    """A tool that stands for ``tool`` (its name, spec and parallelism are the other's) and
    changes how its calls run: ``run`` is the subclass's."""

    def __init__(self, tool: Tool[Any]) -> None:
        super().__init__(tool.ctx)
        self.tool = tool
        self.name = tool.name  # type: ignore[misc]  # the wrapped tool's, per instance
        self.parallel_safe = tool.parallel_safe  # type: ignore[misc]

    @property
    def spec(self) -> ToolSpec:
        return self.tool.spec


_schemas: dict[type, dict[str, Any]] = {}


def input_schema(struct: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON schema of a tool input Struct as the model sees it: nested Structs inlined
    (the API wants no ``$ref``), without titles, defaults (a description says those that
    matter: tokens) or the Struct's docstring, which is for readers of the code."""
    if struct not in _schemas:
        _, components = msgspec.json.schema_components([struct], ref_template="{name}")
        schema = _inline(components[struct.__name__], components)
        schema.pop("description", None)
        _schemas[struct] = schema
    return _schemas[struct]


_DROPPED = frozenset({"title", "default"})


def _inline(node: Any, components: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(item, components) for item in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"$ref"}:
        return _inline(components[node["$ref"]], components)
    inlined = {k: _inline(v, components) for k, v in node.items() if k not in _DROPPED}
    if isinstance(node.get("properties"), dict):  # its keys are field names, kept whole
        inlined["properties"] = {k: _inline(v, components) for k, v in node["properties"].items()}
    return inlined
