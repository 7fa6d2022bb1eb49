"""``python -m isoagent.child.hands CONFINEMENT``: the parent agent's hands, the process that
runs its file tools (``Read``, ``Write``, ``Edit``, ``Glob``, ``Grep``).

The parent agent reads its children's summaries, so a prompt-injected one could ask it for
anything; run in the parent, its file tools would act with all of the user's access (write
``.git/hooks/pre-commit``, read ``~/.ssh/id_rsa`` when the workspace is the home). Its bash
commands run under a writing child's sandbox (``confine_command``); its file tools run here,
in one process a session under the same sandbox (``CONFINEMENT``, JSON), as OpenSSH's
monitor hands work to an unprivileged child: the parent sends each call as a ``ToolRun``
frame on stdin, this process runs the tool and answers with a ``ToolDone`` on stdout, until
stdin ends. No model, no command: only these tools.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import msgspec

from isoagent.child.agent.loop import valid_utf8
from isoagent.child.agent.tools.base import Tool, ToolContext, ToolOutput
from isoagent.child.agent.tools.files import Edit, Read, Write
from isoagent.child.agent.tools.grep import Grep
from isoagent.child.agent.tools.search import Glob
from isoagent.child.confine_command import Confinement
from isoagent.child.main import take_protocol_fd
from isoagent.protocol import FrameError, FrameReader, FrameWriter
from isoagent.protocol.hands import Ready, ToHands, ToolDone

HANDED: tuple[type[Tool], ...] = (Read, Write, Edit, Glob, Grep)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m isoagent.child.hands CONFINEMENT", file=sys.stderr)
        return 2
    spec = msgspec.json.decode(argv[1], type=Confinement)
    writer = FrameWriter(take_protocol_fd())
    reader = FrameReader(0, ToHands)
    os.environ["TMPDIR"] = spec.tmpdir
    try:
        spec.apply()  # before any thread: Landlock binds the calling thread only
    except Exception as exc:  # never run a tool unconfined
        writer.write(Ready(f"its sandbox failed: {exc}"))
        return 126
    writer.write(Ready())
    ctx = ToolContext(
        Path(spec.workdir),
        spec.limits,
        sandbox=spec.policy,
        add_dirs=tuple(Path(path) for path in spec.add_dirs),
    )
    tools = {cls.name: cls(ctx) for cls in HANDED}
    try:
        while (call := reader.read()) is not None:
            assert isinstance(call, ToHands)
            tool = tools.get(call.tool)
            out = tool.run(call.input) if tool else ToolOutput(f"no tool {call.tool!r}", True)
            # a file name that is not UTF-8 (Glob, Grep) must not break the frame
            writer.write(ToolDone(call.id, valid_utf8(out.text), out.is_error))
    except FrameError as exc:
        print(f"isoagent hands: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
