"""Children that break the rules on purpose, started in place of ``python -m isoagent.child``.

``python -m tests.support.faulty_children BEHAVIOUR DIR`` (through
``ISOAGENT_CHILD_COMMAND``; the supervisor starts children with the repo root as
cwd, so ``tests`` and ``protocol`` import). The child writes its pid to
``DIR/child.pid`` and the pids of processes it starts to ``DIR/<name>.pid``.

Behaviours:

- ``truncated``: Hello, takes its Task, writes the first half of a frame, exits 0.
- ``wrong-version``: Hello with a protocol version the parent does not speak, then waits.
- ``hang``: Hello, takes its Task, starts ``sleep 300`` in a process group of its
  own and another in a session of its own (setsid), then sleeps forever.
- ``hide``: Hello, takes its Task, starts ``sleep 300`` in a session of its own with
  an empty environment (no tag: nothing can find it) holding the child's pipes, exits 0.
- ``noisy``: writes 256 KiB to stderr, then becomes the real child (``exec``).
- ``stubborn``: Hello, takes its Task, writes ``DIR/ready.pid`` once SIGTERM only makes
  it write ``DIR/term.pid``, and sleeps (SIGKILL ends it).
- ``forge-model``, ``forge-tokens``, ``forge-turns``, ``forge-tools``, ``forge-options``:
  Hello, takes its Task, and sends model calls it was not given (another model, 100
  times its max_tokens, call after call past its turn limit, the API's web fetch tool,
  the parent's request options: a 10000-token thinking budget and a beta), writing
  each reply's error (or ``ok``) as a line of ``DIR/replies``, until one is refused.
- ``forge-mcp``: Hello, takes its Task, calls ``secret`` of the SDK's server ``calc`` (an
  ``McpCall``), notes ``DIR/forged.pid`` and waits for an answer.
- ``forge-task``: Hello, takes its Task (which gives it no ``task`` tool), asks for a
  general-purpose child of its own (a ``TaskCall``), writes the answer to ``DIR/replies``
  and waits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from isoagent.protocol import (
    PROTOCOL_VERSION,
    CallOptions,
    FrameReader,
    FrameWriter,
    Hello,
    McpCall,
    Message,
    ModelCall,
    ModelReply,
    ParentFrame,
    Progress,
    Task,
    TaskCall,
    TextBlock,
    ToolSpec,
    encode_frame,
)

WRONG_VERSION = PROTOCOL_VERSION + 41
NOISE_BYTES = 256 * 1024


def note(folder: Path, name: str, pid: int) -> None:
    """Write ``DIR/<name>.pid`` atomically, so a test never reads it half written."""
    part = folder / f"{name}.pid.part"
    part.write_text(str(pid))
    part.rename(folder / f"{name}.pid")


def main(behaviour: str, folder: Path) -> int:
    note(folder, "child", os.getpid())
    if behaviour == "noisy":
        os.write(2, b"n" * NOISE_BYTES)
        os.execv(sys.executable, [sys.executable, "-E", "-s", "-P", "-m", "isoagent.child"])
    writer = FrameWriter(1)
    if behaviour == "wrong-version":
        writer.write(Hello(WRONG_VERSION, os.getpid()))
        time.sleep(300)
        return 0
    writer.write(Hello(PROTOCOL_VERSION, os.getpid()))
    reader = FrameReader(0, ParentFrame)
    task = reader.read()
    if behaviour == "truncated":
        frame = encode_frame(Progress("turn", turns=1, tool_calls=0, elapsed=0.1))
        os.write(1, frame[: len(frame) // 2])
        return 0
    if behaviour == "hang":
        grouped = subprocess.Popen(["sleep", "300"], process_group=0)
        escaped = subprocess.Popen(["sleep", "300"], start_new_session=True)
        note(folder, "grouped", grouped.pid)
        note(folder, "escaped", escaped.pid)
        time.sleep(300)
        return 0
    if behaviour == "stubborn":
        signal.signal(signal.SIGTERM, lambda *_: note(folder, "term", os.getpid()))
        note(folder, "ready", os.getpid())
        while True:
            time.sleep(1)
    if behaviour == "hide":
        hidden = subprocess.Popen(["sleep", "300"], start_new_session=True, env={})
        note(folder, "hidden", hidden.pid)
        return 0
    if behaviour == "forge-mcp":  # a tool of the SDK's server its Task does not give it
        writer.write(McpCall(1, "calc", "secret", {}))
        note(folder, "forged", os.getpid())
        reader.read()  # never answered: the parent ends it
        return 0
    if behaviour == "forge-task":  # a child of its own, at the deepest level there is
        writer.write(TaskCall(1, "deeper", "go deeper", "general-purpose"))
        (folder / "replies").write_text(repr(reader.read()))
        reader.read()  # the parent ends it
        return 0
    if behaviour.startswith("forge-") and isinstance(task, Task):
        forge(behaviour, task, writer, reader, folder)
        return 0
    raise SystemExit(f"unknown behaviour {behaviour!r}")


def forge(
    behaviour: str, task: Task, writer: FrameWriter, reader: FrameReader, folder: Path
) -> None:
    """Send model calls outside ``task`` until the parent refuses one."""
    call = ModelCall(
        turn=0,
        model=task.model,
        max_tokens=task.limits.max_tokens,
        system="",
        messages=[Message("user", [TextBlock("hi")])],
    )
    if behaviour == "forge-model":
        call.model = "claude-opus-4-1-expensive"
    if behaviour == "forge-tokens":
        call.max_tokens = task.limits.max_tokens * 100
    if behaviour == "forge-tools":
        call.tools = [ToolSpec("web_fetch", type="web_fetch_20250910")]
    if behaviour == "forge-options":
        call.options = CallOptions(thinking="enabled", thinking_budget=10000, betas=("x",))
    with (folder / "replies").open("a") as replies:
        for _ in range(20):  # forge-turns: each call says it is the first
            writer.write(call)
            reply = reader.read()
            assert isinstance(reply, ModelReply)
            replies.write(f"{reply.error.message if reply.error else 'ok'}\n")
            replies.flush()
            if reply.error:
                return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
