"""What help and the live display cost, in whole-process CPU (user + sys, the process and every
descendant it waited for), medians: ``isoagent --help`` against ``python -c "import click"``,
and a one-shot ``isoagent task`` with stderr on a terminal (the live display: rich imported
and drawing) against the same task with stderr a file (no display library)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.cli_start import SCRIPT
from bench.references import PROMPT, Used, one_bash_call, timed, warm_gateway
from bench.stats import Line, Stat, ratio, reference
from isoagent.parent.children.launch import PACKAGE_ROOT
from tests.conftest import cli_env
from tests.support.messages_server import MessagesServer


def help_cpu(runs: int) -> list[Line]:
    """``isoagent --help`` and ``import click``, interleaved."""
    helped: list[float] = []
    floor: list[float] = []
    for _ in range(runs):
        helped.append(timed([sys.executable, str(SCRIPT), "--help"], {}, PACKAGE_ROOT).cpu)
        floor.append(timed([sys.executable, "-c", "import click"], {}, PACKAGE_ROOT).cpu)
    took, click = Stat([s * 1000 for s in helped], "ms"), Stat([s * 1000 for s in floor], "ms")
    return [
        Line(
            "CLI start",
            "`isoagent --help`, CPU",
            took,
            ratio(took, click, "`import click`"),
            "≤ 1.5x `import click`",
            took.median <= 1.5 * click.median,
        ),
        reference("CLI start", '`python -c "import click"`, CPU', click),
    ]


def _on_terminal(argv: list[str], env: dict[str, str], cwd: Path) -> Used:
    """``argv`` with stderr on a pty (read and thrown away), stdout a file: ``timed``'s."""
    master, slave = pty.openpty()
    drain = threading.Thread(target=_drain, args=(master,), daemon=True)
    drain.start()
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=slave
        )
        os.close(slave)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        out.seek(0)
        stdout = out.read().decode(errors="replace")
    drain.join(timeout=10)
    if os.waitstatus_to_exitcode(status) != 0 or "done" not in stdout:
        raise RuntimeError(f"{argv[:3]} exited {os.waitstatus_to_exitcode(status)}")
    return Used(wall, usage.ru_utime + usage.ru_stime, stdout)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:  # the last writer closed it
        pass
    finally:
        os.close(fd)


def task_display(runs: int) -> list[Line]:
    """A one-shot task (a warm gateway running, so the SDK's import is not in it), with
    stderr on a terminal and with stderr a file, interleaved."""
    shown: list[float] = []
    plain: list[float] = []
    with MessagesServer(one_bash_call()) as server, tempfile.TemporaryDirectory() as tmp:
        work, home = Path(tmp) / "work", Path(tmp) / "home"
        work.mkdir()
        home.mkdir()
        env = {**cli_env(server, HOME=str(home)), "ISOAGENT_WARM_GATEWAY": "1"}
        task = [sys.executable, str(SCRIPT), "task", PROMPT]
        with warm_gateway(env):
            timed(task, env, work, "done")  # the page cache
            for _ in range(runs):
                shown.append(_on_terminal(task, env, work).cpu * 1000)
                plain.append(timed(task, env, work, "done").cpu * 1000)
    live, off = Stat(shown, "ms"), Stat(plain, "ms")
    return [
        Line(
            "one-shot",
            "`isoagent task` with stderr on a terminal (live display, rich), CPU",
            live,
            f"{live.median - off.median:+.0f} ms over stderr a file",
        ),
        reference("one-shot", "`isoagent task` with stderr a file (no display library), CPU", off),
    ]
