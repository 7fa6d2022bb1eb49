"""The thin client and the warm daemon: the command runs in a session process of this
user's daemon, as it would have in the client's own, and only for this user."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from isoagent.parent.daemon import address, wire
from tests.conftest import cli_env, daemon_env
from tests.support.cli import ISOAGENT, read_jsonl, run_cli, run_dirs
from tests.support.messages_server import MessagesServer, Request, text_reply, tool_reply
from tests.support.processes import alive, wait_for
from tests.support.warm import end, listener_pid

CEILING = 60.0


def env_for(server: MessagesServer, tmp_path: Path, **extra: str) -> dict[str, str]:
    """A configuration of this test's own (its own daemon), which leaves soon when idle."""
    return daemon_env(cli_env(server, HOME=str(tmp_path), ANTHROPIC_API_KEY=f"k-{tmp_path.name}",
                              ISOAGENT_WARM_GATEWAY_IDLE="3", **extra))  # fmt: skip


def start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*ISOAGENT, *args], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def descendants(pid: int) -> list[int]:
    found, pending = [], [pid]
    while pending:
        p = pending.pop()
        try:
            kids = [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            continue
        found += kids
        pending += kids
    return found


def slow_bash(request: Request) -> object:
    if request.turn == 0:
        return tool_reply("Bash", {"command": "sleep 60"})
    return text_reply("done")


def test_the_daemon_runs_the_command_and_its_client_imports_no_session_code(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    env = env_for(api_server, tmp_path)
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: print(*sys.modules, sep='\\n', file=sys.stderr))\n"
        "from isoagent.parent.cli.entry import main\nmain()\n"
    )
    try:
        for _ in range(2):  # the first starts the daemon
            argv = [sys.executable, "-c", script, "task", "hi"]
            done = subprocess.run(
                argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=CEILING
            )
            assert done.returncode == 0 and done.stdout == "ok\n", done.stderr[-2000:]
        modules = set(done.stderr.split())
        assert not {"msgspec", "click", "asyncio", "anthropic", "isoagent.parent.session"} & modules
        assert listener_pid(address.daemon_address(env))
    finally:
        end(address.daemon_address(env))


# a session's command run in a process that loaded what the daemon loads: the isoagent
# modules it imported itself
SESSION_IMPORTS = """
import importlib, sys
from isoagent.parent.daemon import server
for module in (*server.PRELOAD, "isoagent.parent.model.warm", "isoagent.parent.children.launch"):
    importlib.import_module(module)
before = set(sys.modules)
from isoagent.parent.cli.main import cli
try:
    cli.main(args=sys.argv[1:], prog_name="isoagent")
finally:
    new = sorted(m for m in set(sys.modules) - before if m.startswith("isoagent"))
    print(*new, file=sys.stderr)
"""


@pytest.mark.parametrize("command", [["task", "go"], ["run", "go"]])
def test_a_session_imports_nothing_the_daemon_has_not_loaded(
    api_server: MessagesServer, tmp_path: Path, command: list[str]
) -> None:
    """Every isoagent module a one-shot session needs is in the daemon's ``PRELOAD``: one a
    session imports is paid by every invocation (``cli.trust``'s was 2 ms of each)."""
    api_server.handler = lambda request: (
        tool_reply("Bash", {"command": "true"}) if request.turn == 0 else text_reply("done")
    )
    env = cli_env(api_server, HOME=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", SESSION_IMPORTS, *command], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=CEILING,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"
    assert done.stderr.splitlines()[-1:] == [""], done.stderr


def test_ctrl_c_in_the_middle_ends_the_session_as_it_would_the_process(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = slow_bash  # type: ignore[assignment]
    env = env_for(api_server, tmp_path)
    try:
        client = start(["task", "wait"], env, tmp_path)
        assert wait_for(lambda: len(api_server.requests) == 1, CEILING)
        time.sleep(0.5)  # the bash call is under way
        client.send_signal(signal.SIGINT)
        _, err = client.communicate(timeout=CEILING)
        assert client.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err
        [run] = run_dirs(tmp_path)
        assert read_jsonl(run / "run.jsonl")[-1]["result"]["status"] == "cancelled"
        api_server.handler = lambda _r: text_reply("ok")  # type: ignore[assignment]
        again = run_cli(["task", "hi"], env, cwd=tmp_path, process=True, input="")
        assert again.returncode == 0, again.stderr  # the daemon serves the next one
    finally:
        end(address.daemon_address(env))


def test_a_killed_daemon_ends_the_invocation_in_one_line_and_the_batch_resumes(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    def handler(request: Request) -> object:
        if "slow" in json.dumps(request.body["messages"][0]) and request.turn == 0:
            return tool_reply("Bash", {"command": "sleep 60"})
        return text_reply("done")

    api_server.handler = handler  # type: ignore[assignment]
    env = env_for(api_server, tmp_path)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "fast", "prompt": "fast"}\n{"id": "slow", "prompt": "slow"}\n')
    out = tmp_path / "out.jsonl"
    try:
        client = start(["batch", str(tasks), "-j", "2", "-o", str(out)], env, tmp_path)
        assert wait_for(lambda: out.exists() and out.read_text().count("\n") == 1, CEILING)
        daemon = listener_pid(address.daemon_address(env))
        for pid in [daemon, *descendants(daemon)]:
            with contextlib.suppress(ProcessLookupError):  # the fast task's may be ending
                os.kill(pid, signal.SIGKILL)
        _, err = client.communicate(timeout=CEILING)  # never a hang
        assert client.returncode != 0
        [line] = [x for x in err.splitlines() if "warm daemon" in x]
        assert "Traceback" not in err and "-o" in line
        api_server.handler = lambda _r: text_reply("done")  # type: ignore[assignment]
        again = run_cli(["batch", str(tasks), "-o", str(out)], env, cwd=tmp_path,
                        process=True, input="")  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert sorted(r["id"] for r in read_jsonl(out)) == ["fast", "slow"]
    finally:
        end(address.daemon_address(env))


def test_an_upgrade_is_never_served_by_the_daemon_of_the_older_code(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """An installed copy of the package, changed after its daemon started: the next
    invocation's daemon is another, running the new code."""
    root = Path(address.__file__).resolve().parents[2]
    site = tmp_path / "site" / "isoagent"
    shutil.copytree(root / "parent" / "api", site)
    for part in ("parent", "child", "protocol"):
        shutil.copytree(
            root / part, site / part, ignore=shutil.ignore_patterns("api", "__pycache__")
        )
    env = env_for(api_server, tmp_path, PYTHONPATH=str(tmp_path / "site"))
    first = installed_address(env)
    try:
        done = run_cli(["task", "hi"], env, cwd=tmp_path, process=True, input="")
        assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
        old = listener_pid(first)
        assert old
        output = site / "parent" / "cli" / "output.py"
        text = output.read_text().replace("for_stdout(result.summary)", '"new " + result.summary')
        output.write_text(text)
        done = run_cli(["task", "hi"], env, cwd=tmp_path, process=True, input="")
        assert done.returncode == 0 and done.stdout == "new ok\n", done.stderr
        assert listener_pid(first) == old  # the old one was not asked
        assert installed_address(env) != first
    finally:
        end(first)
        end(installed_address(env))


def installed_address(env: dict[str, str]) -> str:
    """The daemon address that the package on ``env``'s PYTHONPATH finds for itself."""
    code = (
        "from isoagent.parent.daemon.address import daemon_address as a; print(a().encode().hex())"
    )
    done = subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True,
                          text=True, check=True, cwd="/")  # fmt: skip
    return bytes.fromhex(done.stdout).decode()


# the other user's probes need only the standard library: an interpreter that user can run
# (this one may live under root's home)
OTHERS_PYTHON = next(p for p in ("/usr/bin/python3", sys.executable) if os.path.exists(p))


def playing(uid: int, script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [OTHERS_PYTHON, "-c", f"import os; os.setgroups([]); os.setgid({uid}); os.setuid({uid})\n"
         + script, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/",
    )  # fmt: skip


SQUAT = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX); s.bind(bytes.fromhex(sys.argv[1])); s.listen()\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    c, _ = s.accept(); c.settimeout(2)\n"
    "    try: print(repr(c.recv(65536)), flush=True)\n"
    "    except OSError: pass\n"
)


# connects to the address argv[1], sends the invocation argv[2], prints what comes back
ASK = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX); s.connect(bytes.fromhex(sys.argv[1]))\n"
    "try:\n"
    "    socket.send_fds(s, [bytes.fromhex(sys.argv[2])], [0, 1, 2, 0])\n"
    "except BrokenPipeError:\n"
    "    pass  # refused already, before the invocation was sent\n"
    "print(repr(s.recv(4096)))\n"
)


def test_a_daemon_address_squatted_by_another_user_is_said_and_not_used(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("playing another user needs root")
    env = env_for(api_server, tmp_path)
    where = address.daemon_address(env)
    escapes = f"\0{address.PREFIX}{os.geteuid()}-\x1b]0;pwned\x07"
    squatters = [playing(65534, SQUAT, name.encode().hex()) for name in (where, escapes)]
    try:
        for squatter in squatters:
            assert squatter.stdout is not None and squatter.stdout.readline() == "ready\n"
        done = run_cli(["task", "hi"], env, cwd=tmp_path, process=True, input="")
        assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
        [said] = [line for line in done.stderr.splitlines() if "warm daemon" in line]
        assert "another user's process" in said and "running in this process" in said
        listed = run_cli(["gateway", "list"], env, cwd=tmp_path, process=True)
        assert "\x1b" not in listed.stdout + listed.stderr
        assert str(squatters[0].pid) not in listed.stdout
    finally:
        for squatter in squatters:
            squatter.kill()
        heard = [squatter.communicate()[0] for squatter in squatters]
    assert not [h for h in heard if "isoagent-invocation" in h]  # nothing of the command


def test_gateway_stop_never_signals_a_process_that_does_not_answer_as_a_daemon(
    tmp_path: Path,
) -> None:
    """A process of this user listening at a daemon's address (or one whose pid was
    reused): ``stop`` asks, believes no silence, and signals nothing."""
    where = f"\0{address.PREFIX}{os.geteuid()}-{'f' * address.DIGEST_HEX}"
    silent = subprocess.Popen(
        [sys.executable, "-c", SQUAT, where.encode().hex()], stdout=subprocess.PIPE, text=True
    )
    try:
        assert silent.stdout is not None and silent.stdout.readline() == "ready\n"
        done = run_cli(["gateway", "stop", "ffffffffffff"], {}, cwd=tmp_path, process=True)
        assert "was not stopped" in done.stderr, done.stderr
        assert silent.poll() is None and alive(silent.pid)
    finally:
        silent.kill()
        silent.wait()


def test_another_users_invocation_is_refused_by_this_users_daemon(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("a second uid needs root (to switch to nobody, 65534)")
    env = {**env_for(api_server, tmp_path), "ISOAGENT_WARM_GATEWAY_IDLE": "60"}
    done = run_cli(["task", "hi"], env, cwd=tmp_path, process=True, input="")
    assert done.returncode == 0, done.stderr
    where = address.daemon_address(env)
    invocation = wire.Invocation(["task", "hi"], {}, 0o22, "", ["utf-8:strict"] * 3).encode()
    try:
        other = playing(65534, ASK, where.encode().hex(), invocation.hex())
        out, err = other.communicate(timeout=CEILING)
        assert out.strip() == repr(wire.frame(wire.REFUSED, b"another user's process")), err
    finally:
        end(where)


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux)")
def test_a_confined_process_of_this_user_is_refused_by_its_daemon(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """A process that may do less than the daemon (here no_new_privs, as a sandbox sets)
    would escape its confinement through it: refused, whatever address it names."""
    env = {**env_for(api_server, tmp_path), "ISOAGENT_WARM_GATEWAY_IDLE": "60"}
    done = run_cli(["task", "hi"], env, cwd=tmp_path, process=True, input="")
    assert done.returncode == 0, done.stderr
    where = address.daemon_address(env)
    invocation = wire.Invocation(["task", "hi"], {}, 0o22, "", ["utf-8:strict"] * 3).encode()
    try:
        confined = subprocess.run(
            ["setpriv", "--no-new-privs", OTHERS_PYTHON, "-c", ASK, where.encode().hex(),
             invocation.hex()], capture_output=True, text=True, timeout=CEILING,
        )  # fmt: skip
        refused = wire.frame(wire.REFUSED, b"its process context is not the daemon's")
        assert confined.stdout.strip() == repr(refused), confined.stderr
    finally:
        end(where)


def test_another_user_gets_a_daemon_of_its_own(api_server: MessagesServer, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a second uid needs root (to switch to nobody, 65534)")
    runs = subprocess.run(
        [OTHERS_PYTHON, "-c", "import os, subprocess, sys; os.setgid(65534); os.setuid(65534); "
         "sys.exit(subprocess.run([sys.argv[1], '-c', 'import isoagent']).returncode)",
         sys.executable], capture_output=True,
    )  # fmt: skip
    if runs.returncode != 0:
        pytest.skip(f"user 65534 cannot run this interpreter or package ({sys.executable})")
    shared = tmp_path / "nobody"  # a folder the other user may use
    shared.mkdir()
    os.chown(shared, 65534, 65534)
    tmp_path.chmod(0o755)
    env = {**env_for(api_server, tmp_path), "HOME": str(shared)}
    mine = address.daemon_address(env)
    proc = subprocess.Popen(
        [OTHERS_PYTHON, "-c", "import os, sys; os.setgroups([]); os.setgid(65534); "
         "os.setuid(65534); os.chdir(sys.argv[1]); os.execv(sys.argv[2], sys.argv[2:])",
         str(shared), *ISOAGENT, "task", "hi"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = proc.communicate(timeout=CEILING * 2)
    theirs = [
        "\0" + name[1:]
        for name in (line.split()[-1] for line in Path("/proc/net/unix").read_text().splitlines())
        if name.startswith(f"@{address.PREFIX}65534-")
    ]
    try:
        assert proc.returncode == 0 and out == "ok\n", err
        assert theirs and not listener_pid(mine)  # its own daemon, started by it; not ours
    finally:
        for where in theirs:
            if pid := listener_pid(where):
                os.kill(pid, signal.SIGKILL)


def test_on_a_terminal_the_session_draws_the_progress_display_on_the_clients_terminal(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """The session's stderr is the client's terminal: ``isatty`` says so, and the display
    draws there; the window's size is read from it (SIGWINCH forwarded)."""
    env = env_for(api_server, tmp_path)
    screens = {}
    try:
        for path in ("0", "1"):  # in-process, then through the daemon
            pid, fd = pty.fork()
            if pid == 0:
                os.chdir(tmp_path)
                os.execve(sys.executable, [*ISOAGENT, "task", "hi"],
                          {**env, "ISOAGENT_WARM_GATEWAY": path})  # fmt: skip
            screen = b""
            deadline = time.monotonic() + CEILING
            while time.monotonic() < deadline:
                if select.select([fd], [], [], 1)[0]:
                    try:
                        chunk = os.read(fd, 65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    screen += chunk
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, screen
            screens[path] = screen.decode(errors="replace")
        for screen in screens.values():
            assert "[general-purpose]" in screen and "ok" in screen
        assert ("\x1b" in screens["0"]) == ("\x1b" in screens["1"])
    finally:
        end(address.daemon_address(env))


def test_a_client_that_is_killed_hangs_up_its_session(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = slow_bash  # type: ignore[assignment]
    env = env_for(api_server, tmp_path)
    try:
        client = start(["task", "wait"], env, tmp_path)
        assert wait_for(lambda: len(api_server.requests) == 1, CEILING)
        client.kill()
        client.communicate()
        [run] = run_dirs(tmp_path)
        assert wait_for(lambda: read_jsonl(run / "run.jsonl")[-1]["type"] == "result", CEILING)
        assert read_jsonl(run / "run.jsonl")[-1]["result"]["status"] == "cancelled"
    finally:
        end(address.daemon_address(env))


def test_an_invocation_under_a_lower_file_limit_gets_a_daemon_that_keeps_it(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """``ulimit -n`` bounds what the command's children may open: a daemon started under the
    usual limits served an invocation made under ``ulimit -n 1024`` with its own, and the
    child could open 4096 files. Limits are of the process context, and so of the address."""
    import resource

    def handler(req: Request) -> object:
        if req.turn == 0:
            return tool_reply("Bash", {"command": "echo soft $(ulimit -Sn) hard $(ulimit -Hn)"})
        return text_reply(req.tool_results[0]["content"].strip())

    api_server.handler = handler  # type: ignore[assignment]
    env = env_for(api_server, tmp_path)
    usual = subprocess.run([*ISOAGENT, "task", "go"], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=CEILING, stdin=subprocess.DEVNULL)  # fmt: skip
    assert usual.returncode == 0, usual.stderr
    lower = subprocess.run(
        [*ISOAGENT, "task", "go"], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=CEILING, stdin=subprocess.DEVNULL,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 1024)),
    )  # fmt: skip
    assert lower.returncode == 0, lower.stderr
    assert lower.stdout.strip() == "soft 1024 hard 1024"  # the parent's soft raised to its hard
