"""Which OS sandbox a child gets: read-only agents are read-only by the kernel, not by a prompt."""

from __future__ import annotations

import functools

from isoagent.child.agent.builtin_agents import writes
from isoagent.parent.settings import SandboxChoice
from isoagent.protocol import AgentSpec
from isoagent.protocol.frames import SandboxMode


class SandboxRefused(Exception):
    """The agent needs a sandbox this machine cannot give, and unconfined was not allowed."""


@functools.cache
def landlock_available() -> bool:
    from isoagent.child.sandbox import landlock_abi

    return landlock_abi() > 0


def sandbox_mode(
    agent: AgentSpec, choice: SandboxChoice, allow_unsandboxed: bool, landlock: bool | None = None
) -> SandboxMode:
    """``auto``: agents without write tools get ``read-only``, the others ``workspace``.

    ``landlock``: whether the kernel can sandbox (default: ask it).
    """
    if choice == "off":
        return "off"
    mode: SandboxMode = (
        choice if choice != "auto" else "workspace" if writes(agent) else "read-only"
    )
    if landlock_available() if landlock is None else landlock:
        return mode
    if allow_unsandboxed or (choice == "auto" and mode == "workspace"):
        return "off"
    raise SandboxRefused(
        f"agent {agent.name} must run {mode} but this kernel has no Landlock; "
        "pass --allow-unsandboxed to run it unconfined, or --sandbox off"
    )


def unsandboxed_warning(choice: SandboxChoice) -> str | None:
    """The once-per-run warning when children will run without the kernel sandbox."""
    if choice == "off" or landlock_available():
        return None
    return (
        "warning: Landlock is not available on this kernel: children cannot be sandboxed; "
        "read-only agents are refused unless --allow-unsandboxed is given"
    )
