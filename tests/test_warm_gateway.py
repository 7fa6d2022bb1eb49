"""The warm gateway: later invocations send their model calls to one process per user that
keeps the SDK imported; it answers only its own user, and leaves when idle."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from claude_agent_sdk import StreamEvent
from claude_agent_sdk._internal.message_parser import parse_message

from isoagent.parent.model import warm
from isoagent.protocol import Message, ModelCall, TextBlock, encode_frame
from tests.conftest import cli_env
from tests.support.cli import run_cli, run_cli_listing_modules, start_cli
from tests.support.messages_server import (
    Handler,
    MessagesServer,
    Reply,
    Request,
    text_reply,
    tool_reply,
)
from tests.support.rate_limits import RateLimited
from tests.support.warm import listener_pid

CEILING = 60.0  # seconds: generous, the machine is shared


def wait_until(condition: object, what: str) -> None:
    deadline = time.monotonic() + CEILING
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {CEILING:g} s: {what}"
        time.sleep(0.05)


@pytest.fixture
def warm_env(
    api_server: MessagesServer, tmp_path: Path, request: pytest.FixtureRequest
) -> dict[str, str]:
    def handler(req: Request) -> object:
        return tool_reply("Bash", {"command": "true"}) if req.turn == 0 else text_reply("done")

    api_server.handler = handler  # type: ignore[assignment]
    # a key of this test's own, so its gateway's address is nobody else's; or, with
    # shared_gateway, the key of the gateway this module's tests share
    key = f"key-{tmp_path.name}"
    if "shared_gateway" in request.fixturenames:
        key = f"key-shared-{os.getpid()}"
    return cli_env(
        api_server,
        HOME=str(tmp_path),
        ANTHROPIC_API_KEY=key,
        ISOAGENT_WARM_GATEWAY="1",
        ISOAGENT_WARM_GATEWAY_IDLE="2",
    )


def start(env: dict[str, str], *wrapper: str) -> subprocess.Popen[bytes]:
    """A gateway (run through ``wrapper``), listening."""
    process = subprocess.Popen(
        [*wrapper, sys.executable, "-P", "-m", "isoagent.parent.daemon"],
        env={**env, "ISOAGENT_WARM_GATEWAY_IDLE": "600"},
        stdin=subprocess.DEVNULL,
    )
    where = warm.address(env)
    if wrapper:  # its process context is not ours: nor is its address
        code = "from isoagent.parent.model.warm import address; print(address().encode().hex())"
        found = subprocess.run([*wrapper, sys.executable, "-P", "-c", code], env=env,
                               capture_output=True, text=True, check=True, cwd="/")  # fmt: skip
        where = bytes.fromhex(found.stdout).decode()
    try:
        wait_until(lambda: warm._answers(where), "the gateway listens")
    except BaseException:
        end(process)
        raise
    return process


def end(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()


@contextlib.contextmanager
def started(env: dict[str, str], *wrapper: str) -> Iterator[subprocess.Popen[bytes]]:
    """A gateway this test owns (run through ``wrapper``), listening; ended after."""
    process = start(env, *wrapper)
    try:
        yield process
    finally:
        end(process)


@pytest.fixture
def gateway(warm_env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    with started(warm_env) as process:
        yield process


@pytest.fixture(scope="module")
def _shared_gateways() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    running: dict[str, subprocess.Popen[bytes]] = {}
    yield running
    for process in running.values():
        end(process)


@pytest.fixture
def shared_gateway(
    warm_env: dict[str, str], _shared_gateways: dict[str, subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    """A gateway listening at ``warm_env``'s address, which the tests of this module on this
    worker share (each start imports the SDK, seconds of CPU), ended after the last. For
    tests that leave no state in it: no learned rate limit, no process of theirs."""
    where = warm.address(warm_env)  # the shared key, and the server's current address
    process = _shared_gateways.get(where)
    if process is None or process.poll() is not None or not warm._answers(where):
        if process is not None:
            end(process)
        process = _shared_gateways[where] = start(warm_env)
    return process


def arriving_together(count: int, handler: Handler) -> Handler:
    """``handler``, met by the first ``count`` requests at once: processes started together
    reach the server seconds apart on a loaded machine, and then meet no limit."""
    barrier = threading.Barrier(count, timeout=CEILING)
    arrived = itertools.count()

    def together(req: Request) -> Reply:
        if next(arrived) < count:
            barrier.wait()
        return handler(req)

    return together


def run_task(env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    return run_cli_listing_modules(["task", "run true"], env, cwd=cwd, timeout=CEILING)


def test_an_invocation_sends_its_calls_to_the_running_gateway_and_never_imports_the_sdk(
    api_server: MessagesServer, warm_env: dict[str, str], shared_gateway: object, tmp_path: Path
) -> None:
    done, modules = run_task(warm_env, tmp_path)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-2000:]
    assert "anthropic" not in modules
    assert [r.turn for r in api_server.requests] == [0, 1]


def test_without_a_gateway_the_first_invocation_starts_one_that_leaves_when_idle(
    api_server: MessagesServer, warm_env: dict[str, str], tmp_path: Path
) -> None:
    where = warm.address(warm_env)
    assert not warm._answers(where)
    done, modules = run_task(warm_env, tmp_path)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-2000:]
    assert "anthropic" not in modules  # the gateway it started made the calls
    assert [r.turn for r in api_server.requests] == [0, 1]
    wait_until(lambda: not warm._answers(where), "the idle gateway exits")


def test_a_second_gateway_started_at_the_same_time_leaves_before_importing_the_sdk(
    warm_env: dict[str, str], shared_gateway: object
) -> None:
    """Sixteen invocations that find no gateway start sixteen: all but one must stop
    before the SDK's second of CPU."""
    second = subprocess.run(
        [sys.executable, "-X", "importtime", "-P", "-m", "isoagent.parent.daemon"],
        env={**warm_env, "ISOAGENT_WARM_GATEWAY_IDLE": "600"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CEILING,
    )
    assert second.returncode == 0, second.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in second.stderr.splitlines()}
    assert "isoagent.parent.daemon.server" in imported  # it ran: its own imports are there
    assert "anthropic" not in imported


def test_a_started_gateway_holds_only_the_variables_its_address_is_made_of(
    warm_env: dict[str, str], tmp_path: Path
) -> None:
    # another invocation with the same address shares it: what else the first one had
    # (a marker a test looks for, a token of that shell) must not live on in it
    env = {**warm_env, "UNRELATED_TOKEN": "of-the-first-shell", "ISOAGENT_WARM_GATEWAY_IDLE": "60"}
    done, _ = run_task(env, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    pid = listener_pid(warm.address(env))
    try:
        names = {v.split(b"=")[0] for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")}
        assert b"UNRELATED_TOKEN" not in names
        assert {b"ANTHROPIC_API_KEY", b"ANTHROPIC_BASE_URL"} <= names
    finally:
        os.kill(pid, signal.SIGKILL)


def test_turned_off_the_invocation_imports_the_sdk_and_starts_nothing(
    api_server: MessagesServer, warm_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**warm_env, "ISOAGENT_WARM_GATEWAY": "0"}
    done, modules = run_task(env, tmp_path)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-2000:]
    assert "anthropic" in modules
    assert not warm._answers(warm.address(env))


def test_another_configuration_gets_a_gateway_of_its_own(warm_env: dict[str, str]) -> None:
    other = {**warm_env, "ANTHROPIC_API_KEY": warm_env["ANTHROPIC_API_KEY"] + "-2"}
    assert warm.address(other) != warm.address(warm_env)
    moved = {**warm_env, "ANTHROPIC_BASE_URL": "http://127.0.0.1:1"}
    assert warm.address(moved) != warm.address(warm_env)
    proxied = {**warm_env, "https_proxy": "http://127.0.0.1:3128"}
    assert warm.address(proxied) != warm.address(warm_env)
    assert warm.address({**warm_env, "UNRELATED": "x"}) == warm.address(warm_env)


@pytest.mark.skipif(os.getuid() != 0, reason="playing another user needs root")
def test_the_gateway_answers_no_other_user(
    warm_env: dict[str, str], shared_gateway: object
) -> None:
    """Abstract sockets have no permissions: the gateway checks its peer's uid itself."""
    where = warm.address(warm_env)
    call = encode_frame(ModelCall(0, "m", 10, "", [Message("user", [TextBlock("steal")])]))
    script = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect(bytes.fromhex(sys.argv[1]))\n"
        "try:\n"
        "    s.sendall(bytes.fromhex(sys.argv[2]))\n"
        "    sys.stdout.write(repr(s.recv(65536)))\n"
        "except (BrokenPipeError, ConnectionResetError):\n"
        "    sys.stdout.write(repr(b''))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, where.encode().hex(), call.hex()],
        capture_output=True,
        text=True,
        timeout=CEILING,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "b''"  # connected, and closed without an answer


def test_a_gateway_address_held_by_another_user_is_not_used(
    api_server: MessagesServer, warm_env: dict[str, str], tmp_path: Path
) -> None:
    """Whoever binds the address first gets the calls: the client checks its peer's uid."""
    if os.getuid() != 0:
        pytest.skip("playing another user needs root")
    where = warm.address(warm_env)
    squatter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, socket, sys, time\n"
            "os.setgid(65534); os.setuid(65534)\n"
            "s = socket.socket(socket.AF_UNIX); s.bind(bytes.fromhex(sys.argv[1])); s.listen()\n"
            "print('ready', flush=True)\n"
            "while True: c, _ = s.accept(); print(c.recv(65536), flush=True)\n",
            where.encode().hex(),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert squatter.stdout is not None and squatter.stdout.readline() == "ready\n"
        done, modules = run_task(warm_env, tmp_path)
        assert done.returncode == 0 and "done" in done.stdout, done.stderr[-2000:]
        assert "held by another user" in done.stderr
        assert "anthropic" in modules  # the calls went through the SDK in-process
    finally:
        squatter.kill()
        squatter.wait()
    assert "steal" not in (squatter.stdout.read() if squatter.stdout else "")


def test_a_sandboxed_child_cannot_reach_the_gateway(
    api_server: MessagesServer, warm_env: dict[str, str], shared_gateway: object, tmp_path: Path
) -> None:
    from isoagent.child.sandbox import landlock_abi

    if landlock_abi() < 6:
        pytest.skip("Landlock ABI 6 (scoped abstract unix sockets) is not available")
    where = warm.address(warm_env).encode("unicode_escape").decode()
    probe = (
        f'python3 -c "import socket; s = socket.socket(socket.AF_UNIX); '
        f"s.connect(b'{where}'.decode('unicode_escape')); print('reached')\""
    )

    def handler(req: Request) -> object:
        if req.turn == 0:
            return tool_reply("Bash", {"command": probe})
        return text_reply(req.tool_results[0]["content"])

    api_server.handler = handler  # type: ignore[assignment]
    done = run_cli(
        ["task", "--agent", "Explore", "probe"], warm_env, cwd=tmp_path, input="", process=True
    )
    assert "reached" not in done.stdout
    assert "Operation not permitted" in done.stdout or "PermissionError" in done.stdout, done.stdout


def test_a_client_that_sends_garbage_gets_no_answer_and_the_gateway_stays(
    warm_env: dict[str, str], shared_gateway: subprocess.Popen[bytes]
) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(warm.address(warm_env))
        sock.sendall(b"\x00\x00\x00\x03abc")
        assert sock.recv(65536) == b""
    assert shared_gateway.poll() is None and warm._answers(warm.address(warm_env))


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux)")
def test_a_child_cannot_read_the_key_from_the_gateways_environment(
    api_server: MessagesServer, warm_env: dict[str, str], tmp_path: Path
) -> None:
    """The gateway holds the key in its environment, as the CLI does, so it is not dumpable.
    Its capabilities are dropped here: a root process with capabilities is out of reach of
    a child without them anyway, a gateway of an ordinary user is not."""
    no_caps = ("setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all")
    with started(warm_env, *no_caps) as gateway:
        steal = f"cat /proc/{gateway.pid}/environ | tr '\\0' '\\n' | grep ANTHROPIC_API_KEY"

        def handler(req: Request) -> object:
            if req.turn == 0:
                return tool_reply("Bash", {"command": steal})
            return text_reply(req.tool_results[0]["content"])

        api_server.handler = handler  # type: ignore[assignment]
        for sandbox in ("off", "auto"):
            args = ["task", "--sandbox", sandbox, "--allow-unsandboxed", "steal"]
            done = run_cli(args, warm_env, cwd=tmp_path, input="")
            assert done.returncode == 0, done.stderr
            assert warm_env["ANTHROPIC_API_KEY"] not in done.stdout
            # sandboxed, the gateway is not even in its pid namespace
            assert "Permission denied" in done.stdout or "No such file" in done.stdout


def test_concurrent_invocations_share_one_rate_limit_and_each_hears_its_waits(
    api_server: MessagesServer, warm_env: dict[str, str], gateway: object, tmp_path: Path
) -> None:
    """Four `isoagent task` at once, one request a second: the gateway's one limiter holds
    them all after the first refusals; four limiters of their own would each be refused
    again when their retry-afters end together."""
    limited = RateLimited(lambda req: text_reply("done"), requests_per_second=1)
    api_server.handler = arriving_together(4, limited)
    clis = [start_cli(["task", f"say hi {n}"], warm_env, cwd=tmp_path) for n in range(4)]
    outputs = [cli.communicate(timeout=CEILING) for cli in clis]
    assert [cli.returncode for cli in clis] == [0] * 4, outputs
    assert [out for out, _err in outputs] == ["done\n"] * 4
    assert limited.refused <= 3
    said = [err for _out, err in outputs if "isoagent: rate limited" in err]
    assert said, f"the gateway's waiting reached no invocation's stderr: {outputs}"


def test_partial_messages_cross_the_warm_socket_to_the_invocation_that_asked(
    api_server: MessagesServer, warm_env: dict[str, str], shared_gateway: object, tmp_path: Path
) -> None:
    args = ["task", "--output-format", "stream-json", "--include-partial-messages", "run true"]
    done, modules = run_cli_listing_modules(args, warm_env, cwd=tmp_path, timeout=CEILING)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "anthropic" not in modules  # the gateway made the calls
    messages = [parse_message(json.loads(line)) for line in done.stdout.splitlines()]
    events = [m.event for m in messages if isinstance(m, StreamEvent)]
    assert [e["type"] for e in events].count("message_start") == 2
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(d.get("partial_json", "") for d in deltas) == '{"command": "true"}'
    assert "".join(d.get("text", "") for d in deltas) == "done"
