"""isoagent: run Claude subagents as separate OS processes.

The Python API, for scripts and a user's own click commands::

    import isoagent

    options = isoagent.Options(model="haiku", max_turns=5, sandbox="read-only")
    result = isoagent.task("Find where auth is handled", agent="Explore", options=options)
    print(result.result)            # the subagent's summary
    result.status, result.usage, result.session_id, result.transcript

``task`` runs one subagent in its own process; ``run`` runs the parent agent, which may
delegate with its ``task`` tool. ``atask`` and ``arun`` are the same from asyncio.
``Options`` holds every setting, typed, with the CLI's defaults (``isoagent run --help``);
keywords are accepted too, each the ``Options`` field of its name (``workdir="."``,
``allowed_tools=["Read", "Bash(git:*)"]``, ``agents={"rev": AgentDefinition(...)}``,
``resume=SESSION_ID`` ...): a name that is no field is a ``TypeError`` before anything runs.

This is the import package's root (``parent/api/`` in the repository, mapped to ``isoagent``
by ``pyproject.toml``). Every child process imports it first, so it imports nothing itself:
each function imports what it needs when called.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself is not imported: a child must start fast
if TYPE_CHECKING:
    from typing import Any

    from isoagent._calls import IsoagentError, Result
    from isoagent.parent.options import AgentDefinition, Options

__all__ = [
    "AgentDefinition",
    "IsoagentError",
    "Options",
    "Result",
    "arun",
    "atask",
    "run",
    "task",
]


def task(
    prompt: str, *, agent: str = "general-purpose", options: Options | None = None, **kw: Any
) -> Result:
    """Run one subagent of type ``agent`` on ``prompt`` in its own process; its result."""
    from isoagent._calls import run_sync

    return run_sync(atask(prompt, agent=agent, options=options, **kw))


def run(prompt: str, *, options: Options | None = None, **kw: Any) -> Result:
    """Run the parent agent on ``prompt`` (it may delegate to subagents); its result."""
    from isoagent._calls import run_sync

    return run_sync(arun(prompt, options=options, **kw))


async def atask(
    prompt: str, *, agent: str = "general-purpose", options: Options | None = None, **kw: Any
) -> Result:
    """``task`` from asyncio."""
    from isoagent._calls import options_with, run_one

    return await run_one(prompt, agent, options_with(options, kw))


async def arun(prompt: str, *, options: Options | None = None, **kw: Any) -> Result:
    """``run`` from asyncio."""
    from isoagent._calls import options_with, run_one

    return await run_one(prompt, None, options_with(options, kw))


_LAZY = {
    "Result": "isoagent._calls",
    "IsoagentError": "isoagent._calls",
    "Options": "isoagent.parent.options",
    "AgentDefinition": "isoagent.parent.options",
}


def __getattr__(name: str) -> Any:
    """``isoagent.Options``, ``isoagent.Result`` ...: imported when first asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'isoagent' has no attribute {name!r}")
