"""What ``isoagent.task``/``run`` do: the CLI's options parsed by the CLI's own option
definitions (so names, types and defaults are the same), one session, a ``Result``."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click

from isoagent.parent.events import ChildFinished
from isoagent.protocol import Status, Usage

T = TypeVar("T")
# print mode's options that make no sense in a call
_NOT_OPTIONS = frozenset({"prompt", "print_flag", "input_format", "output_format"})
_RENAMED = {"agents": "agents_json"}


class IsoagentError(Exception):
    """The run could not start: a bad option, no credentials, an unknown agent type."""


@dataclass(frozen=True)
class Result:
    """How a run ended. ``result`` is the answer (the agent's final summary)."""

    result: str
    status: Status
    usage: Usage
    session_id: str  # the run id: ``resume=`` it to continue the conversation
    transcript: Path  # the agent's conversation, one JSON event per line
    run_dir: Path
    error: str = ""
    turns: int = 0
    tool_calls: int = 0
    duration: float = 0.0
    children: list[ChildFinished] = field(default_factory=list)

    @property
    def is_error(self) -> bool:
        return self.status != "ok"


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on a new event loop; inside a running one, say to await instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise IsoagentError("an event loop is running here: use await isoagent.atask/arun")


async def run_one(
    prompt: str, agent_name: str | None, workdir: str | Path, options: Mapping[str, Any]
) -> Result:
    """The parent (``agent_name`` None) or one subagent, in a session of its own."""
    from isoagent.parent.batch.input import unknown_agent
    from isoagent.parent.children.supervisor import ChildRequest
    from isoagent.parent.cli.prompts import describe
    from isoagent.parent.session import Interrupted, Session, SessionError

    if not prompt.strip():
        raise IsoagentError("the prompt is empty")
    settings = api_settings(workdir, options)
    agent = None
    if agent_name is not None:
        agent = settings.agents.get(agent_name)
        if agent is None:
            raise IsoagentError(unknown_agent(agent_name, settings.agents))
    try:
        async with Session.open(settings) as session:
            if agent is None:
                result = await session.run_parent(prompt)
                transcript = session.run.path / "run.jsonl"
            else:
                finished = await session.supervisor.run(
                    ChildRequest(describe(prompt), prompt, agent)
                )
                result = finished.result
                transcript = session.run.path / Path(finished.transcript).name
            final = session.finish(result)
            run_dir = session.run.path
            run_id = session.run.run_id
    except (SessionError, Interrupted) as exc:
        raise IsoagentError(str(exc)) from None
    return Result(
        result=result.summary,
        status=result.status,
        usage=result.usage,
        session_id=run_id,
        transcript=transcript,
        run_dir=run_dir,
        error=result.error,
        turns=result.turns,
        tool_calls=result.tool_calls,
        duration=result.duration,
        children=list(final.children),
    )


def api_settings(workdir: str | Path, options: Mapping[str, Any]) -> Any:
    """``Settings`` for keyword ``options``, parsed as ``isoagent -p`` parses its flags."""
    from isoagent.parent.cli.options import settings_from
    from isoagent.parent.cli.print_mode import print_mode
    from isoagent.parent.parent_agent import claude_settings

    params = {p.name: p for p in print_mode.params if p.name and p.name not in _NOT_OPTIONS}
    args: list[str] = []
    for name, value in {"workdir": workdir, **options}.items():
        param = params.get(_RENAMED.get(name, name))
        if param is None or not isinstance(param, click.Option):
            raise TypeError(f"unknown option {name!r}; options: {', '.join(sorted(params))}")
        args += _as_args(param, value)
    try:
        ctx = print_mode.make_context("isoagent", args)
    except click.ClickException as exc:
        raise IsoagentError(exc.format_message()) from None
    values = ctx.params
    try:
        return claude_settings(
            settings_from(values),
            system_prompt=values["system_prompt"],
            append_system_prompt=values["append_system_prompt"],
            allowed_tools=values["allowed_tools"],
            disallowed_tools=values["disallowed_tools"],
            agents=values["agents_json"],
            permission_mode=values["permission_mode"],
            continue_=values["continue_"],
            resume=values["resume"],
        )
    except ValueError as exc:
        raise IsoagentError(str(exc)) from None


def _as_args(option: click.Option, value: Any) -> list[str]:
    """The command-line words that give ``option`` the value ``value``."""
    flag = max(option.opts, key=len)
    if option.is_flag:
        return [flag] if value else []
    if option.multiple:
        values = [value] if isinstance(value, str | Path) else list(value)
        return [word for item in values for word in (flag, str(item))]
    if isinstance(value, bool):  # child_network=False
        value = "on" if value else "off"
    if isinstance(value, dict | list):  # agents={...}
        import json

        value = json.dumps(value)
    return [flag, str(value)]
