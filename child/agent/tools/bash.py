"""``Bash``: one command in its own process group, output bounded in memory."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Annotated

import msgspec

from isoagent.child.agent.process_tree import signal_name, signal_processes
from isoagent.child.agent.tools.base import Tool, ToolError
from isoagent.child.agent.tools.bash_rules import GIT_LOCKED, CommandRefused, check, rule_path
from isoagent.child.agent.truncate import keep_sizes, mark_cut, truncate
from isoagent.child.confine_command import confined_env

MAX_TIMEOUT_MS = 600_000  # Claude Code's, for a command in the foreground
# how long the pipe may stay open after the command exits (a background job holds it)
_EOF_GRACE = 0.5
_CHECK_EVERY = 0.1  # seconds between checks for a timeout or a cancel
_CHUNK = 65536
# without an output cap, still never hold more than this much output in memory
_UNCAPPED = 10_000_000
REFUSED = "command refused: "  # a command its Bash(...) rules do not allow


class BashInput(msgspec.Struct, forbid_unknown_fields=True):
    """Claude Code's Bash input (without its run_in_background, dangerouslyDisableSandbox)."""

    command: Annotated[str, msgspec.Meta(description="The bash command to run.")]
    timeout: (
        Annotated[
            float,
            msgspec.Meta(
                gt=0, le=MAX_TIMEOUT_MS, description="Optional timeout in ms (max 600000)."
            ),
        ]
        | msgspec.UnsetType
    ) = msgspec.UNSET
    description: (
        Annotated[str, msgspec.Meta(description="What the command does, in 5-10 words.")]
        | msgspec.UnsetType
    ) = msgspec.UNSET


class Bash(Tool[BashInput]):
    name = "Bash"
    description = (
        "Run a bash command in the workspace directory and return its combined stdout and "
        "stderr. Each call starts a fresh shell: `cd` and variables do not persist between "
        "calls. stdin is empty, so interactive commands fail; pass flags such as `-y` or "
        "`--no-pager`. Long output is truncated (head and tail kept). A non-zero exit code "
        "makes the result an error. The command is killed when it times out, and any "
        "background processes it started (`cmd &`) are ended when it finishes. Prefer "
        "Read, Edit, Glob and Grep over cat, sed, find and grep."
    )
    Input = BashInput

    def execute(self, inp: BashInput) -> str:
        ctx = self.ctx
        if ctx.cancelled.is_set():
            raise ToolError("cancelled")
        if ctx.bash_allow or ctx.bash_deny:
            try:
                check(inp.command, ctx.bash_allow, ctx.bash_deny)
            except CommandRefused as exc:
                raise ToolError(f"{REFUSED}{exc}") from None
        timeout = ctx.limits.bash_timeout if inp.timeout is msgspec.UNSET else inp.timeout / 1000
        cap = ctx.limits.output_cap if ctx.limits.output_cap > 0 else _UNCAPPED
        output = _Output(cap)
        env = ctx.env
        if ctx.bash_allow:  # held to prefix rules: git too (see bash_rules)
            env = {**(os.environ if env is None else env), **GIT_LOCKED}
            temp = env.get("TMPDIR") or "/tmp"
            writable = [str(ctx.workdir), *map(str, ctx.add_dirs), temp]
            env["PATH"] = rule_path(env.get("PATH", os.defpath), writable)
        if ctx.command_prefix:  # the wrapper that confines it starts with no loader variable
            env = confined_env(os.environ if env is None else env)
        proc = _start([*ctx.command_prefix, "/bin/bash", "-c", inp.command], ctx.workdir, env)
        timed_out = self._supervise(proc, output, timeout)
        if ctx.cancelled.is_set():
            raise ToolError("cancelled")
        if timed_out:
            status = f"[command timed out after {timeout:g} s and was killed]"
        elif proc.returncode < 0:
            status = f"[killed by signal {signal_name(-proc.returncode)}]"
        elif proc.returncode > 0:
            status = f"[exit code {proc.returncode}]"
        else:
            return output.text(cap) or "(no output)"
        text = output.text(max(cap - len(status) - 1, 1))
        if text and not text.endswith("\n"):
            text += "\n"
        raise ToolError(text + status)

    def _supervise(self, proc: subprocess.Popen[bytes], output: _Output, timeout: float) -> bool:
        """Collect output until the command ends; True if it timed out.

        Its process group is registered in the context while it runs, and killed
        once it ends, which ends any background job the command left behind.
        """
        assert proc.stdout is not None
        self.ctx.process_groups.add(proc.pid)
        try:
            with proc.stdout:
                return _collect(proc, output, timeout, self.ctx.cancelled)
        finally:
            signal_processes(signal.SIGKILL, groups=[proc.pid])
            self.ctx.process_groups.discard(proc.pid)
            self.ctx.reap_orphans()


def _start(argv: list[str], cwd: Path, env: dict[str, str] | None) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
        )
    except OSError as exc:
        raise ToolError(f"cannot start bash: {exc}") from None


def _collect(
    proc: subprocess.Popen[bytes], output: _Output, timeout: float, cancelled: threading.Event
) -> bool:
    """Read the command's output while it runs, and up to ``_EOF_GRACE`` after it ends (a
    background job may still hold the pipe); kill its group on timeout or cancel. True if it
    timed out. One thread: a thread of its own per command cost a child more than the
    command's own start."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    ended: float | None = None  # when the command ended
    timed_out = False
    while True:
        now = time.monotonic()
        if ended is None and proc.poll() is not None:
            ended = now
        elif ended is None and (cancelled.is_set() or now >= deadline):
            timed_out, ended = _kill(proc, cancelled), now
        wait = _CHECK_EVERY if ended is None else ended + _EOF_GRACE - now
        if wait <= 0:
            return timed_out
        if poller.poll(wait * 1000):
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            output.add(chunk)
    # every writer is gone; the command may still run, its output closed
    return timed_out if ended is not None else _wait(proc, deadline, cancelled)


def _wait(proc: subprocess.Popen[bytes], deadline: float, cancelled: threading.Event) -> bool:
    """Wait for the command; kill its group at ``deadline`` or on cancel. True if it timed
    out."""
    while True:
        try:
            proc.wait(timeout=min(_CHECK_EVERY, max(deadline - time.monotonic(), 0)))
            return False
        except subprocess.TimeoutExpired:
            pass
        if cancelled.is_set() or time.monotonic() >= deadline:
            return _kill(proc, cancelled)


def _kill(proc: subprocess.Popen[bytes], cancelled: threading.Event) -> bool:
    """SIGKILL the command's process group and reap the command; True if it timed out
    (it was not cancelled)."""
    signal_processes(signal.SIGKILL, groups=[proc.pid])
    proc.wait()
    return not cancelled.is_set()


class _Output:
    """Collects a stream keeping only its first and last ``cap`` bytes and the total size."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[: -self.cap]

    def text(self, cap: int) -> str:
        """The output decoded, within ``cap`` characters, the cut marked as ``truncate`` does."""
        head, tail, total = bytes(self.head), bytes(self.tail), self.total
        if total == len(head) + len(tail):
            return truncate((head + tail).decode("utf-8", "replace"), cap)
        head_size, tail_size = keep_sizes(cap)
        head_text = head.decode("utf-8", "replace")[:head_size]
        # the tail buffer may start inside a multi-byte character: skip its continuation bytes
        tail_text = tail.lstrip(bytes(range(0x80, 0xC0))).decode("utf-8", "replace")
        tail_text = tail_text[max(len(tail_text) - tail_size, 0) :]
        omitted = max(total - len(head_text.encode()) - len(tail_text.encode()), 0)
        return mark_cut(head_text, tail_text, omitted, "bytes")
