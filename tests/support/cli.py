"""Running the ``isoagent`` CLI: in this process through click's CliRunner (the default, as a
shell would see it: stdout, stderr, exit code), or as a real subprocess where the process is
what is tested (signals, ancestry, closed descriptors, pipelines).

A module whose tests use ``both_paths`` (``pytestmark = pytest.mark.usefixtures(...)``) runs
each twice: in-process, and as a real thin client handing the command to the worker's warm
daemon, whose output and exit codes must be the same."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ISOAGENT = [sys.executable, "-m", "isoagent"]
PATHS = ("in-process", "daemon")
_path = ["in-process"]  # how run_cli runs a command that does not ask for a process


def use_path(path: str) -> None:
    _path[0] = path


def run_cli(
    args: list[str],
    env: dict[str, str],
    *,
    cwd: Path,
    input: str | None = None,
    timeout: float = 60,
    process: bool = False,
    command: list[str] = ISOAGENT,
) -> subprocess.CompletedProcess[str]:
    """``isoagent ARGS`` with exactly ``env`` as its environment, in ``cwd``.

    In-process by default; an exception that escapes the command (a traceback, for a user)
    is raised here. ``process=True`` runs ``command`` (``python -m isoagent``) instead.
    """
    if not process and _path[0] == "daemon":
        from tests.conftest import daemon_env

        process, env = True, daemon_env(env)
    if process:
        return subprocess.run(
            [*command, *args],
            env=env,
            cwd=cwd,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    from click.testing import CliRunner

    from isoagent.parent.cli.main import cli
    from tests.conftest import in_process_env

    with _environment(in_process_env(env)), contextlib.chdir(cwd):
        result = CliRunner().invoke(cli, args, input=input, prog_name="isoagent")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` is exactly ``env`` for a while."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


# the CLI's own entry point, listing every module loaded by the time the process exits
_LISTING_MODULES = (
    "import atexit, sys\n"
    "atexit.register(lambda: print(*sys.modules, sep='\\n', file=sys.stderr))\n"
    "from isoagent.parent.cli.main import main\n"
    "main()\n"
)


def run_cli_listing_modules(
    args: list[str], env: dict[str, str], *, cwd: Path, timeout: float = 60
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``run_cli``, and every module the CLI had loaded when it exited (``-X importtime``
    misses those loaded by ``importlib.import_module``)."""
    command = [sys.executable, "-c", _LISTING_MODULES]
    done = run_cli(args, env, cwd=cwd, input="", timeout=timeout, process=True, command=command)
    return done, set(done.stderr.split())


def start_cli(args: list[str], env: dict[str, str], *, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*ISOAGENT, *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_dirs(workdir: Path) -> list[Path]:
    return sorted((workdir / ".isoagent" / "runs").iterdir())


def kill_child_once(ready: Callable[[], object], workdir: Path) -> threading.Thread:
    """SIGKILL the first child of the run in ``workdir`` once ``ready()`` holds (its command
    got that far): from the test, as its own commands cannot (pid 1 of their namespace, it
    gets no signal it does not handle from them). ``join`` the thread."""
    from tests.support.processes import wait_for

    def kill() -> None:
        assert wait_for(ready, 30)
        os.kill(started_children(workdir)[0], signal.SIGKILL)

    killer = threading.Thread(target=kill)
    killer.start()
    return killer


def started_children(workdir: Path) -> list[int]:
    """The pids of the children the runs in ``workdir`` started so far, oldest first, as
    the parent saw them start (a child's commands see the child as pid 1 of their
    namespace)."""
    events = [e for run in run_dirs(workdir) for e in read_jsonl(run / "run.jsonl")]
    return [event["pid"] for event in events if event["type"] == "child_started"]


def shell(
    pipeline: str, env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run a real bash pipeline in which ``isoagent`` is this checkout's CLI."""
    script = f'isoagent() {{ {shlex.join(ISOAGENT)} "$@"; }}\nset -o pipefail\n{pipeline}'
    return subprocess.run(
        ["bash", "-c", script],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def in_private_mounts(
    setup: str, script: str, env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``setup``, then ``script`` (bash; ``isoagent`` is this checkout's CLI) in a mount
    namespace of their own, as root: what ``setup`` mounts is seen by nothing else. Skips
    the test where that cannot be had."""
    import pytest

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount in a namespace of the test's own")
    body = f'isoagent() {{ {shlex.join(ISOAGENT)} "$@"; }}\n{{ {setup}\n}} || exit 99\n{script}'
    done = subprocess.run(
        ["unshare", "-m", "bash", "-c", body],
        # no warm daemon: one started in the namespace would live on in it, out of reach
        env={**env, "ISOAGENT_WARM_GATEWAY": "0"},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if done.returncode == 99:
        pytest.skip(f"cannot mount in a namespace of the test's own: {done.stderr}")
    return done
