"""isoagent: run Claude subagents as separate OS processes.

The Python API, for scripts, services and a user's own click commands::

    import isoagent

    options = isoagent.Options(model="haiku", max_turns=5, sandbox="read-only")
    result = isoagent.task("Find where auth is handled", agent="Explore", options=options)
    print(result.result)            # the subagent's summary
    result.status, result.usage, result.cost_usd, result.session_id, result.transcript

``task`` runs one subagent in its own process; ``run`` runs the parent agent, which may
delegate with its ``Agent`` tool. ``atask`` and ``arun`` are the same from asyncio;
``Session`` runs several over one fork server, gateway and run folder; ``batch`` (and
``abatch``) is ``isoagent batch``: each task's ``TaskRecord`` as it finishes, resumable from
its ``output`` file (``read_tasks(path)`` reads a JSONL file of tasks). All work from any
thread, the sync ones inside a running event loop too (a Jupyter cell: on a worker thread),
write nothing to stderr (notices go to the ``isoagent`` logger) and install no signal
handler: Ctrl-C reaches the caller as ``KeyboardInterrupt`` (``asyncio.CancelledError`` in a
task) once every child is ended.

``Options`` holds every setting, typed, with the CLI's defaults (``isoagent run --help``),
checked when it is built (``OptionError`` names the field, what it may be, and the nearest
name for a misspelt one); keywords are accepted too, each the ``Options`` field of its name
(``workdir="."``, ``allowed_tools=["Read", "Bash(git:*)"]``, ``resume=SESSION_ID`` ...).

A run that does not end ok raises its class of ``IsoagentError`` (``AuthenticationError``,
``ModelNotFoundError``, ``APIConnectionError``, ``RateLimitError``, ``TurnLimitError``,
``BudgetExceededError``, ``ChildCrashedError``, ``ChildTimeoutError``,
``RunInterruptedError``), its ``result`` the ``Result``; each is the CLI's exit code too.

This is the import package's root (``parent/api/`` in the repository, mapped to ``isoagent``
by ``pyproject.toml``). Every child process imports it first, so it imports nothing itself:
each name is imported when first used.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself is not imported: a child must start fast
if TYPE_CHECKING:
    from typing import Any

    from isoagent._batch import abatch, batch, read_tasks
    from isoagent._calls import Result
    from isoagent._session import Session
    from isoagent.errors import (
        APIConnectionError,
        APIError,
        AuthenticationError,
        BudgetExceededError,
        ChildCrashedError,
        ChildTimeoutError,
        IsoagentError,
        ModelNotFoundError,
        OptionError,
        RateLimitError,
        RunInterruptedError,
        TurnLimitError,
    )
    from isoagent.parent.options import AgentDefinition, Options
    from isoagent.parent.records.events import TaskRecord

__all__ = [
    "APIConnectionError",
    "APIError",
    "AgentDefinition",
    "AuthenticationError",
    "BudgetExceededError",
    "ChildCrashedError",
    "ChildTimeoutError",
    "IsoagentError",
    "ModelNotFoundError",
    "OptionError",
    "Options",
    "RateLimitError",
    "Result",
    "RunInterruptedError",
    "Session",
    "TaskRecord",
    "TurnLimitError",
    "abatch",
    "arun",
    "atask",
    "batch",
    "read_tasks",
    "run",
    "task",
]  # fmt: skip
_ERRORS = (
    "IsoagentError", "OptionError", "APIError", "AuthenticationError", "ModelNotFoundError",
    "APIConnectionError", "RateLimitError", "TurnLimitError", "BudgetExceededError",
    "ChildCrashedError", "ChildTimeoutError", "RunInterruptedError",
)  # fmt: skip
_LAZY = {
    "Options": "isoagent.parent.options",
    "AgentDefinition": "isoagent.parent.options",
    "Result": "isoagent._calls",
    "Session": "isoagent._session",
    "batch": "isoagent._batch",
    "abatch": "isoagent._batch",
    "read_tasks": "isoagent._batch",
    "TaskRecord": "isoagent.parent.records.events",
    **dict.fromkeys(_ERRORS, "isoagent.errors"),
}


def task(
    prompt: str, *, agent: str = "general-purpose", options: Options | None = None, **kw: Any
) -> Result:
    """Run one subagent of type ``agent`` on ``prompt`` in its own process; its ``Result``.
    A run that does not end ok raises its ``IsoagentError`` (``.result`` is the Result)."""
    from isoagent._calls import run_sync

    return run_sync(atask(prompt, agent=agent, options=options, **kw))


def run(prompt: str, *, options: Options | None = None, **kw: Any) -> Result:
    """Run the parent agent on ``prompt`` (it may delegate to subagents); its ``Result``.
    A run that does not end ok raises its ``IsoagentError`` (``.result`` is the Result)."""
    from isoagent._calls import run_sync

    return run_sync(arun(prompt, options=options, **kw))


async def atask(
    prompt: str, *, agent: str = "general-purpose", options: Options | None = None, **kw: Any
) -> Result:
    """``task`` from asyncio: it changes nothing of the caller's loop or signals."""
    from isoagent._calls import options_with, run_one

    result = await run_one(prompt, agent, options_with(options, kw))
    return result.raise_for_status()


async def arun(prompt: str, *, options: Options | None = None, **kw: Any) -> Result:
    """``run`` from asyncio: it changes nothing of the caller's loop or signals."""
    from isoagent._calls import options_with, run_one

    result = await run_one(prompt, None, options_with(options, kw))
    return result.raise_for_status()


def __getattr__(name: str) -> Any:
    """``isoagent.Options``, ``isoagent.Result`` ...: imported when first asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'isoagent' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
