"""One command, confined as a writing child is: ``python -m isoagent.child.confine_command
CONFINEMENT -- COMMAND...`` applies ``CONFINEMENT`` (JSON) to itself and execs COMMAND.

The parent agent's ``Bash`` and MCP servers run through it: the parent reads children's
summaries, so a prompt-injected one could ask it for anything. The command gets the
sandbox a writing child gets (its namespaces, Landlock, seccomp, limits); the parent
process itself stays unconfined, as it must to write run folders and reach the API.

This wrapper is started with an allow-listed environment (``identity.allowed_environment``).
Variables a config gives the command (an MCP server's ``env``: ``LD_PRELOAD``, ``PYTHONPATH``,
a token it names) come as one JSON object in ``CONFINED_ENV`` and are set only once the
sandbox is in force, just before the exec: no loader or interpreter ever sees them in a
process that is not confined yet.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import msgspec

from isoagent.child.identity import is_loader_variable
from isoagent.protocol import Limits, SandboxPolicy

CONFINED_ENV = "ISOAGENT_CONFINED_ENV"  # the command's own variables, set after confining


class Confinement(msgspec.Struct):
    """A writing child's sandbox, for a process of the parent's (this module's command, the
    parent's hands: ``child/hands.py``)."""

    policy: SandboxPolicy
    limits: Limits
    workdir: str
    tmpdir: str
    add_dirs: list[str] = []

    def apply(self) -> None:
        """Confine this process; it may fork, and only the fork returns (``sandbox.pids``)."""
        from isoagent.child import sandbox

        sandbox.confine(
            self.policy,
            self.limits,
            Path(self.workdir),
            Path(self.tmpdir),
            [Path(p) for p in self.add_dirs],
        )


def confined_env(
    environ: Mapping[str, str], own: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The wrapper's environment for a command: ``environ`` less every loader's and
    interpreter's variable (``identity.is_loader_variable``); those, and ``own`` (a config's
    variables for the command), carried past the wrapper in ``CONFINED_ENV`` and set once
    the sandbox is in force."""
    later = {k: v for k, v in environ.items() if is_loader_variable(k)} | dict(own or {})
    env = {k: v for k, v in environ.items() if not is_loader_variable(k)}
    if later:
        env[CONFINED_ENV] = msgspec.json.encode(later).decode()
    return env


def command_prefix(confinement: Confinement) -> tuple[str, ...]:
    """What goes before a command so that it runs under ``confinement``."""
    spec = msgspec.json.encode(confinement).decode()
    return (sys.executable, "-E", "-s", "-P", "-m", "isoagent.child.confine_command", spec, "--")


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m isoagent.child.confine_command CONFINEMENT -- COMMAND...")
        return 2
    spec = msgspec.json.decode(argv[1], type=Confinement)
    try:
        own = msgspec.json.decode(os.environ.pop(CONFINED_ENV, "{}"), type=dict[str, str])
    except msgspec.DecodeError as exc:
        print(f"isoagent: the command was not run: {CONFINED_ENV}: {exc}", file=sys.stderr)
        return 126
    try:
        spec.apply()
    except Exception as exc:  # never run it unconfined
        print(f"isoagent: the command was not run: its sandbox failed: {exc}", file=sys.stderr)
        return 126
    from isoagent.child.sandbox import egress

    egress.keep_across_exec()  # its way out lasts as long as the command
    os.environ.update(own)  # confined now: a loader's variable acts inside the sandbox only
    try:  # a bare name (an MCP server's command) is looked for on its PATH
        os.execvp(argv[3], argv[3:])
    except OSError as exc:
        print(f"isoagent: cannot run {argv[3]}: {exc.strerror or exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
