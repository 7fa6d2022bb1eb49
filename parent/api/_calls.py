"""What ``isoagent.task``/``run`` do: ``Options`` made ``Settings`` by the core the CLI
uses too, one session, a ``Result``. Nothing here imports click or the CLI."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from isoagent.parent.options import Options, settings_for
from isoagent.parent.records.events import ChildFinished
from isoagent.protocol import Status, Usage

T = TypeVar("T")


class IsoagentError(Exception):
    """The run could not start: a bad option, no credentials, an unknown agent type."""


@dataclass(frozen=True)
class Result:
    """How a run ended. ``result`` is the answer (the agent's final summary)."""

    result: str
    status: Status
    usage: Usage
    session_id: str  # the run's session (its run id, or Options.session_id): ``resume=`` it
    transcript: Path  # the agent's conversation, one JSON event per line
    run_dir: Path
    error: str = ""
    turns: int = 0
    tool_calls: int = 0
    duration: float = 0.0
    children: list[ChildFinished] = field(default_factory=list)
    structured_output: Any = None  # with Options.json_schema: the answer, as that JSON

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


def options_with(options: Options | None, changes: Mapping[str, Any]) -> Options:
    """``options`` (or the defaults) with keyword ``changes``; an unknown name is a
    ``TypeError`` naming it, an ``Options`` that is not one too."""
    if options is not None and not isinstance(options, Options):
        raise TypeError(f"options must be an isoagent.Options, not {type(options).__name__}")
    return (options or Options()).replace(**changes)


async def run_one(prompt: str, agent_name: str | None, options: Options) -> Result:
    """The parent (``agent_name`` None) or one subagent, in a session of its own."""
    from isoagent.parent.batch.input import unknown_agent
    from isoagent.parent.children.supervisor import ChildRequest, describe
    from isoagent.parent.session import Interrupted, Session, SessionError

    if not prompt.strip():
        raise IsoagentError("the prompt is empty")
    try:
        settings = settings_for(options)
    except ValueError as exc:
        raise IsoagentError(str(exc)) from None
    agent = None
    if agent_name is not None:
        agent = settings.agents.get(agent_name)
        if agent is None:
            raise IsoagentError(unknown_agent(agent_name, settings.agents))
    try:
        async with Session.open(settings, signals=False) as session:
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
        session_id=settings.session_id or run_id,
        transcript=transcript,
        run_dir=run_dir,
        error=result.error,
        turns=result.turns,
        tool_calls=result.tool_calls,
        duration=result.duration,
        children=list(final.children),
        structured_output=final.structured_output,
    )
