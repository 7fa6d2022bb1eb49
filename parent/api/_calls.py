"""What ``isoagent.task``/``run`` do: ``Options`` made ``Settings`` by the core the CLI
uses too, one session, a ``Result``. Nothing here imports click or the CLI."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from isoagent.errors import (
    API_ERRORS,
    STATUS_ERRORS,
    IsoagentError,
    ModelNotFoundError,
    OptionError,
)
from isoagent.parent.options import Options
from isoagent.parent.records.events import ChildFinished
from isoagent.protocol import ModelError, Status, Usage

T = TypeVar("T")


@dataclass(frozen=True)
class Result:
    """How a run ended. ``result`` is the answer (the agent's final summary); ``status``
    says how it ended (``ok``, or the failure ``exception`` is of)."""

    result: str
    status: Status
    usage: Usage  # the agent's own (the parent's, for ``run``; the subagent's, for ``task``)
    session_id: str  # the run's session (a UUID, or Options.session_id): ``resume=`` it
    transcript: Path  # the agent's conversation, one JSON event per line
    run_dir: Path
    error: str = ""
    turns: int = 0
    tool_calls: int = 0
    duration: float = 0.0
    children: list[ChildFinished] = field(default_factory=list)  # each child's result, usage
    structured_output: Any = None  # with Options.json_schema: the answer, as that JSON
    cost_usd: float = 0.0  # what the run's model calls cost, every agent's
    children_cost_usd: dict[str, float] = field(default_factory=dict)  # by ChildFinished.child
    api_error: ModelError | None = None  # status error: the failed model call's kind and code

    @property
    def is_error(self) -> bool:
        return self.status != "ok"

    @property
    def exception(self) -> IsoagentError | None:
        """The failure the run ended in, as its class (None: it ended ok)."""
        if self.status == "ok":
            return None
        error: type[IsoagentError] = STATUS_ERRORS[self.status]
        if self.status == "error" and self.api_error is not None:
            error = API_ERRORS.get(self.api_error.kind, error)
            if self.api_error.status_code == 404:
                error = ModelNotFoundError
        return error(f"{self.status}: {self.error or self.status}", self)

    def raise_for_status(self) -> Result:
        """This result if it ended ok; else its failure raised (``exception``)."""
        if self.exception is not None:
            raise self.exception
        return self


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on a new event loop: in this thread, or inside a running one (a
    Jupyter cell) on a worker thread, this one waiting for it."""
    with on_a_loop_of_its_own() as call:
        return call(asyncio.run, coroutine)


@contextlib.contextmanager
def on_a_loop_of_its_own() -> Iterator[Callable[..., Any]]:
    """What runs an event loop's work from sync code: called here, or where this thread
    runs a loop already (which cannot run a second), in a worker thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        yield lambda function, *args: function(*args)
        return
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="isoagent") as worker:
        yield lambda function, *args: worker.submit(function, *args).result()


def check_prompt(prompt: object) -> str:
    """``prompt``, if it is one (``OptionError`` says why not)."""
    if not isinstance(prompt, str):
        raise OptionError(f"the prompt must be a str, not {type(prompt).__name__}")
    if not prompt.strip():
        raise OptionError("the prompt is empty")
    return prompt


def options_with(options: Options | None, changes: Mapping[str, Any]) -> Options:
    """``options`` (or the defaults) with keyword ``changes``, checked (``OptionError``)."""
    if options is not None and not isinstance(options, Options):
        raise OptionError(f"options must be an isoagent.Options, not {type(options).__name__}")
    return Options(**changes) if options is None else options.replace(**changes)


async def run_one(prompt: str, agent_name: str | None, options: Options) -> Result:
    """The parent (``agent_name`` None) or one subagent, in a session of its own."""
    from isoagent._session import Session

    check_prompt(prompt)

    async with Session(options) as session:
        if agent_name is None:
            return await session.run_parent(prompt)
        return await session.task_result(prompt, agent=agent_name)
