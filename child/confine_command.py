"""One command, confined as a writing child is: ``python -m isoagent.child.confine_command
CONFINEMENT -- COMMAND...`` applies ``CONFINEMENT`` (JSON) to itself and execs COMMAND.

The parent agent's ``Bash`` runs its commands through it: the parent reads children's
summaries, so a prompt-injected one could ask it for anything. The command gets the
sandbox a writing child gets (its namespaces, Landlock, seccomp, limits); the parent
process itself stays unconfined, as it must to write run folders and reach the API.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import msgspec

from isoagent.protocol import Limits, SandboxPolicy


class Confinement(msgspec.Struct):
    policy: SandboxPolicy
    limits: Limits
    workdir: str
    tmpdir: str
    add_dirs: list[str] = []


def command_prefix(confinement: Confinement) -> tuple[str, ...]:
    """What goes before a command so that it runs under ``confinement``."""
    spec = msgspec.json.encode(confinement).decode()
    return (sys.executable, "-E", "-s", "-P", "-m", "isoagent.child.confine_command", spec, "--")


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m isoagent.child.confine_command CONFINEMENT -- COMMAND...")
        return 2
    spec = msgspec.json.decode(argv[1], type=Confinement)
    from isoagent.child import sandbox

    try:
        sandbox.confine(
            spec.policy,
            spec.limits,
            Path(spec.workdir),
            Path(spec.tmpdir),
            [Path(p) for p in spec.add_dirs],
        )
    except Exception as exc:  # never run it unconfined
        print(f"isoagent: the command was not run: its sandbox failed: {exc}", file=sys.stderr)
        return 126
    from isoagent.child.sandbox import egress

    egress.keep_across_exec()  # its way out lasts as long as the command
    try:  # a bare name (an MCP server's command) is looked for on its PATH
        os.execvp(argv[3], argv[3:])
    except OSError as exc:
        print(f"isoagent: cannot run {argv[3]}: {exc.strerror or exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
