"""child.sandbox against the real kernel.

Each test restricts a fresh ``python -c`` process (never the pytest process),
lets it try things, and asserts on the JSON it prints.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from isoagent.child.sandbox import SandboxError, apply_sandbox, landlock_abi

REPO = Path(__file__).resolve().parent.parent
ABI = landlock_abi()
needs_landlock = pytest.mark.skipif(ABI == 0, reason="Landlock is unavailable in this kernel")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to a fresh uid")

PRELUDE = """\
import errno, json, os, resource, signal, subprocess, sys, threading, time
from pathlib import Path
from isoagent.child.sandbox import SandboxError, apply_limits, apply_sandbox, disable_network
args = sys.argv[1:]
out = {}

def attempt(fn):
    try:
        fn()
        return "ok"
    except Exception as exc:
        return type(exc).__name__

def bash(script, **kw):
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, **kw)
    return {"rc": proc.returncode, "err": proc.stderr}

def drop_to_nobody():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    # A uid change clears "dumpable", which makes /proc/self root-owned; a normally
    # started unprivileged process has it set.
    import ctypes
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
"""


def run(code: str, *args: object, cwd: Path) -> dict[str, Any]:
    """Run PRELUDE + code in a new interpreter; return the ``out`` dict it prints."""
    script = PRELUDE + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
    proc = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A workspace with a file and a src/ tree, a tmpdir, and a sibling dir outside both."""
    workspace, tmpdir, outside = tmp_path / "ws", tmp_path / "tmp", tmp_path / "outside"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "main.py").write_text("print('hi')\n")
    (workspace / "notes.txt").write_text("hello\n")
    tmpdir.mkdir()
    outside.mkdir()
    return workspace, tmpdir, outside


def test_landlock_abi_is_a_version() -> None:
    assert isinstance(ABI, int)
    assert ABI >= 0


def test_off_and_unknown_modes(tmp_path: Path) -> None:
    apply_sandbox("off", tmp_path, tmp_path)  # a no-op, safe in the pytest process
    with pytest.raises(SandboxError, match="unknown sandbox mode"):
        apply_sandbox("strict", tmp_path, tmp_path)


@needs_landlock
def test_read_only(dirs: tuple[Path, Path, Path]) -> None:
    workspace, tmpdir, _ = dirs
    out = run(
        """
        ws, tmp = Path(args[0]), Path(args[1])
        apply_sandbox("read-only", ws, tmp)
        out["read"] = (ws / "notes.txt").read_text()
        out["write_ws"] = attempt(lambda: open(ws / "x", "w"))
        out["bash_ws"] = bash("touch x; rm -rf src", cwd=ws)
        out["write_tmp"] = attempt(lambda: (tmp / "a").write_text("a"))
        out["bash_tmp"] = bash(f"echo b > {tmp}/b && mkdir {tmp}/d && mv {tmp}/b {tmp}/d/")
        out["devnull"] = attempt(lambda: open("/dev/null", "w").write("x"))
        out["bash_devnull"] = bash("echo hi > /dev/null")
        out["signal_parent"] = attempt(lambda: os.kill(os.getppid(), 0))
        """,
        workspace,
        tmpdir,
        cwd=workspace,
    )
    assert out["read"] == "hello\n"
    assert out["write_ws"] == "PermissionError"
    assert out["bash_ws"]["rc"] != 0
    assert "Permission denied" in out["bash_ws"]["err"]
    assert (workspace / "src" / "main.py").exists()
    assert not (workspace / "x").exists()
    assert out["write_tmp"] == "ok"
    assert out["bash_tmp"]["rc"] == 0, out["bash_tmp"]["err"]
    assert (tmpdir / "d" / "b").read_text() == "b\n"
    assert out["devnull"] == "ok"
    assert out["bash_devnull"]["rc"] == 0, out["bash_devnull"]["err"]
    assert out["signal_parent"] == ("PermissionError" if ABI >= 6 else "ok")


@needs_landlock
def test_workspace_mode(dirs: tuple[Path, Path, Path]) -> None:
    workspace, tmpdir, outside = dirs
    out = run(
        """
        ws, tmp, outside = map(Path, args)
        apply_sandbox("workspace", ws, tmp)
        out["write_ws"] = attempt(lambda: (ws / "new.txt").write_text("new"))
        out["bash_ws"] = bash("mkdir d && echo x > d/f && mv d/f g && rm -r d src", cwd=ws)
        out["write_outside"] = attempt(lambda: (outside / "x").write_text("x"))
        out["bash_outside"] = bash(f"touch {outside}/y")
        out["move_out"] = bash(f"mv notes.txt {outside}/", cwd=ws)
        """,
        workspace,
        tmpdir,
        outside,
        cwd=workspace,
    )
    assert out["write_ws"] == "ok"
    assert out["bash_ws"]["rc"] == 0, out["bash_ws"]["err"]
    assert (workspace / "g").read_text() == "x\n"
    assert not (workspace / "src").exists()
    assert out["write_outside"] == "PermissionError"
    assert out["bash_outside"]["rc"] != 0
    assert out["move_out"]["rc"] != 0
    assert list(outside.iterdir()) == []
    assert (workspace / "notes.txt").exists()


@needs_landlock
def test_sandbox_errors(dirs: tuple[Path, Path, Path]) -> None:
    workspace, tmpdir, _ = dirs
    out = run(
        """
        ws, tmp = Path(args[0]), Path(args[1])
        def error(fn):
            try:
                fn()
            except SandboxError as exc:
                return str(exc)
        out["missing"] = error(lambda: apply_sandbox("workspace", ws / "nope", tmp))
        out["still_free"] = attempt(lambda: (ws / "free").write_text("x"))
        stop = threading.Event()
        threading.Thread(target=stop.wait).start()
        out["threaded"] = error(lambda: apply_sandbox("read-only", ws, tmp))
        out["threaded_net"] = error(disable_network)
        stop.set()
        import _thread, time
        while threading.active_count() > 1:
            time.sleep(0.01)
        bare = threading.Lock()
        bare.acquire()
        _thread.start_new_thread(bare.acquire, ())  # a thread threading does not count
        out["bare_thread"] = error(lambda: apply_sandbox("read-only", ws, tmp))
        bare.release()
        """,
        workspace,
        tmpdir,
        cwd=workspace,
    )
    assert "cannot open" in out["missing"] and "nope" in out["missing"]
    assert out["still_free"] == "ok"
    assert "before any thread" in out["threaded"]
    assert "before any thread" in out["threaded_net"]
    assert "before any thread" in (out["bare_thread"] or "")


def test_address_space_limit(tmp_path: Path) -> None:
    out = run(
        """
        apply_limits(0, 512, 0, 0)
        out["limit"] = resource.getrlimit(resource.RLIMIT_AS)
        out["self"] = attempt(lambda: bytearray(2 * 1024**3))
        out["bash"] = bash(f"{sys.executable} -c 'bytearray(2*1024**3)'")
        out["raise_hard"] = bash("ulimit -v unlimited")
        """,
        cwd=tmp_path,
    )
    assert out["limit"] == [512 * 1024**2] * 2
    assert out["self"] == "MemoryError"
    assert out["bash"]["rc"] == 1
    assert "MemoryError" in out["bash"]["err"]
    assert out["raise_hard"]["rc"] != 0


def test_file_size_limit(tmp_path: Path) -> None:
    out = run(
        """
        apply_limits(0, 0, 0, 1)
        def big():
            with open("big", "wb") as f:
                f.write(b"x" * (2 * 1024**2))
        try:
            big()
        except OSError as exc:
            out["self"] = errno.errorcode[exc.errno]
        # subprocess resets SIGXFSZ to SIG_DFL in the child unless restore_signals=False.
        out["bash"] = bash("head -c 2000000 /dev/zero > big2", restore_signals=False)
        out["bash_default"] = bash("head -c 2000000 /dev/zero > big3")
        """,
        cwd=tmp_path,
    )
    assert out["self"] == "EFBIG"
    assert out["bash"]["rc"] != 0
    assert "File too large" in out["bash"]["err"]
    assert out["bash_default"]["rc"] != 0
    assert "File size limit exceeded" in out["bash_default"]["err"]
    for name in ("big", "big2", "big3"):
        assert (tmp_path / name).stat().st_size == 1024**2


def test_cpu_limit(tmp_path: Path) -> None:
    out = run(
        """
        apply_limits(1, 0, 0, 0)
        out["limit"] = resource.getrlimit(resource.RLIMIT_CPU)
        out["rc"] = subprocess.run([sys.executable, "-c", "while True: pass"]).returncode
        """,
        cwd=tmp_path,
    )
    assert out["limit"] == [1, 2]
    assert out["rc"] in (-9, -24)  # SIGKILL, SIGXCPU: the loop never ends by itself


@needs_root
def test_max_processes(tmp_path: Path) -> None:
    """RLIMIT_NPROC counts all processes of the real uid and root is exempt, so the
    restricted process switches to ``nobody``. A bash fork loop would retry EAGAIN
    forks with back-off for ~15 s, so the loop is ``os.fork`` instead."""
    out = run(
        """
        drop_to_nobody()
        def owned(proc):
            try:
                return proc.stat().st_uid == 65534
            except OSError:  # it exited meanwhile
                return False
        mine = sum(owned(p) for p in Path("/proc").iterdir() if p.name.isdigit())
        apply_limits(0, 0, mine + 4, 0)
        r, w = os.pipe()
        pids = []
        out["stopped"] = None
        for _ in range(30):
            try:
                pid = os.fork()
            except BlockingIOError:
                out["stopped"] = "EAGAIN"
                break
            if pid == 0:
                os.close(w)
                os.read(r, 1)
                os._exit(0)
            pids.append(pid)
        os.close(w)
        for pid in pids:
            os.waitpid(pid, 0)
        out["forked"] = len(pids)
        """,
        cwd=tmp_path,
    )
    assert out["stopped"] == "EAGAIN"
    assert 1 <= out["forked"] <= 4


@pytest.fixture
def server() -> Iterator[socket.socket]:
    """A listening socket on the host's 127.0.0.1."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock


NETWORK_PROBE = """
def connect(port):
    with socket.socket() as sock:
        sock.settimeout(3)
        sock.connect(("127.0.0.1", port))
out["host_before"] = attempt(lambda: connect(int(args[0])))
{setup}
disable_network()
out["host_after"] = attempt(lambda: connect(int(args[0])))
with socket.create_server(("127.0.0.1", 0)) as inner:
    out["inner"] = attempt(lambda: connect(inner.getsockname()[1]))
"""


def test_disable_network(tmp_path: Path, server: socket.socket) -> None:
    code = "import socket\n" + NETWORK_PROBE.format(setup="")
    out = run(code, server.getsockname()[1], cwd=tmp_path)
    assert out["host_before"] == "ok"
    assert out["host_after"] == "ConnectionRefusedError"
    assert out["inner"] == "ok"


@needs_root
@pytest.mark.parametrize(
    "setup",
    [
        "drop_to_nobody()",
        # a fork server's child: the server is not dumpable, so /proc/self is root's
        "drop_to_nobody(); from isoagent.child.sandbox import make_undumpable; make_undumpable()",
    ],
    ids=["started", "forked-by-an-undumpable-server"],
)
def test_disable_network_unprivileged(tmp_path: Path, server: socket.socket, setup: str) -> None:
    """Without CAP_SYS_ADMIN the fallback is a user namespace holding the network one."""
    if Path("/proc/sys/user/max_user_namespaces").read_text().strip() == "0":
        pytest.skip("user namespaces are disabled")
    code = "import socket\n" + NETWORK_PROBE.format(setup=setup)
    out = run(code, server.getsockname()[1], cwd=tmp_path)
    assert out["host_before"] == "ok"
    assert out["host_after"] == "ConnectionRefusedError"
    assert out["inner"] == "ok"
