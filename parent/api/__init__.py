"""isoagent: run Claude subagents as separate OS processes.

The Python API, for scripts and a user's own click commands::

    import isoagent

    result = isoagent.task("Find where auth is handled", agent="Explore", workdir=".")
    print(result.result)            # the subagent's summary
    result.status, result.usage, result.session_id, result.transcript

``task`` runs one subagent in its own process; ``run`` runs the parent agent, which may
delegate with its ``task`` tool. ``atask`` and ``arun`` are the same from asyncio. Their
options are the CLI's (``isoagent run --help``, ``isoagent -p --help``) with Python names
and the same defaults: ``model="haiku"``, ``max_turns=5``, ``sandbox="read-only"``,
``allowed_tools=["Read", "Bash(git:*)"]``, ``agents={...}``, ``resume=SESSION_ID`` ...

This is the import package's root (``parent/api/`` in the repository, mapped to ``isoagent``
by ``pyproject.toml``). Every child process imports it first, so it imports nothing itself:
each function imports what it needs when called.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself is not imported: a child must start fast
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from isoagent._calls import IsoagentError, Result

__all__ = ["IsoagentError", "Result", "arun", "atask", "run", "task"]


def task(
    prompt: str, *, agent: str = "general-purpose", workdir: str | Path = ".", **options: Any
) -> Result:
    """Run one subagent of type ``agent`` on ``prompt`` in its own process; its result."""
    from isoagent._calls import run_sync

    return run_sync(atask(prompt, agent=agent, workdir=workdir, **options))


def run(prompt: str, *, workdir: str | Path = ".", **options: Any) -> Result:
    """Run the parent agent on ``prompt`` (it may delegate to subagents); its result."""
    from isoagent._calls import run_sync

    return run_sync(arun(prompt, workdir=workdir, **options))


async def atask(
    prompt: str, *, agent: str = "general-purpose", workdir: str | Path = ".", **options: Any
) -> Result:
    """``task`` from asyncio."""
    from isoagent._calls import run_one

    return await run_one(prompt, agent, workdir, options)


async def arun(prompt: str, *, workdir: str | Path = ".", **options: Any) -> Result:
    """``run`` from asyncio."""
    from isoagent._calls import run_one

    return await run_one(prompt, None, workdir, options)


def __getattr__(name: str) -> Any:
    """``isoagent.Result`` and ``isoagent.IsoagentError``, imported when first asked for."""
    if name in ("Result", "IsoagentError"):
        from isoagent import _calls

        return getattr(_calls, name)
    raise AttributeError(f"module 'isoagent' has no attribute {name!r}")
