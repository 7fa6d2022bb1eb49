"""``isoagent gateway list|stop``: this user's warm gateways, real ones started by ``isoagent``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from isoagent.parent.daemon import address
from isoagent.parent.model import warm
from tests.conftest import cli_env
from tests.support.cli import run_cli, start_cli
from tests.support.messages_server import MessagesServer, text_reply
from tests.support.processes import alive, wait_for
from tests.support.warm import listener_pid


def gateway_env(server: MessagesServer, key: str) -> dict[str, str]:
    """A configuration of this test's own: its gateway's address is nobody else's."""
    return cli_env(
        server, ANTHROPIC_API_KEY=key, ISOAGENT_WARM_GATEWAY="1", ISOAGENT_WARM_GATEWAY_IDLE="60"
    )


def gateway_id(env: dict[str, str]) -> str:
    return warm.address(env).rsplit("-", 1)[-1][:12]


def listed(env: dict[str, str], cwd: Path) -> dict[str, dict[str, Any]]:
    done = run_cli(["gateway", "list", "--json"], env, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return {g["id"]: g for g in json.loads(done.stdout)}


def ask_once(env: dict[str, str], cwd: Path) -> None:
    done = run_cli(["task", "hi"], env, cwd=cwd, input="", process=True)
    assert done.returncode == 0, done.stderr[-2000:]


def end(env: dict[str, str]) -> None:
    """The gateway a failed test left: ended by a signal, not by the command under test."""
    pid = listener_pid(address.daemon_address(env))
    if pid:
        os.kill(pid, signal.SIGKILL)


def test_gateway_list_shows_its_server_age_memory_and_calls(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    env = gateway_env(api_server, f"key-{tmp_path.name}")
    try:
        ask_once(env, tmp_path)
        ask_once(env, tmp_path)
        mine = listed(env, tmp_path)[gateway_id(env)]
        assert mine["pid"] == listener_pid(address.daemon_address(env))
        assert mine["server"] == api_server.base_url and mine["calls_served"] == 2
        assert mine["memory_bytes"] > 20 << 20 and mine["age_seconds"] >= 0
        assert mine["idle_seconds"] == 60 and mine["sessions_served"] == 2 and mine["key"]
        text = run_cli(["gateway", "list"], env, cwd=tmp_path).stdout.splitlines()
        assert text[0].split() == [
            "ID", "PID", "SERVER", "KEY", "PYTHON", "AGE", "MEMORY", "CALLS", "SESSIONS"
        ]  # fmt: skip
        row = next(line for line in text if line.startswith(gateway_id(env)))
        assert (
            f"  {mine['pid']}  " in row and api_server.base_url in row and row.endswith("2 served")
        )
    finally:
        end(env)


def test_gateway_stop_ends_the_one_named_and_no_other(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    first = gateway_env(api_server, f"key-1-{tmp_path.name}")
    second = gateway_env(api_server, f"key-2-{tmp_path.name}")
    try:
        ask_once(first, tmp_path)
        ask_once(second, tmp_path)
        pid = listener_pid(address.daemon_address(first))
        other = listener_pid(address.daemon_address(second))
        done = run_cli(["gateway", "stop", gateway_id(first)[:8]], first, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"{gateway_id(first)}  stopped (pid {pid})\n"
        assert not alive(pid) and not listener_pid(address.daemon_address(first))
        assert alive(other) and gateway_id(second) in listed(second, tmp_path)
        ask_once(first, tmp_path)  # the next invocation starts one again
        assert listed(first, tmp_path)[gateway_id(first)]["calls_served"] == 1
    finally:
        end(first)
        end(second)


def test_a_stopped_gateway_answers_the_call_it_has(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    env = gateway_env(api_server, f"key-{tmp_path.name}")
    api_server.handler = lambda req: text_reply("SLOW-ANSWER", delay=1.5)
    task = start_cli(["task", "hi"], env, cwd=tmp_path)
    try:
        name = gateway_id(env)
        assert wait_for(
            lambda: listed(env, tmp_path).get(name, {}).get("calls_running") == 1, 30
        ), "the call never reached the gateway"
        pid = listener_pid(address.daemon_address(env))
        done = run_cli(["gateway", "stop", name], env, cwd=tmp_path)
        assert done.returncode == 0 and done.stdout == f"{name}  stopped (pid {pid})\n"
        out, err = task.communicate(timeout=60)
        assert task.returncode == 0 and out == "SLOW-ANSWER\n", err[-2000:]
        assert "warm gateway" not in err  # answered there, not by a fallback here
        assert not alive(pid)
    finally:
        task.kill()
        task.wait()
        end(env)


def test_gateway_stop_of_an_unknown_id_is_one_clear_line(tmp_path: Path) -> None:
    done = run_cli(["gateway", "stop", "zzzz"], {}, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "isoagent: no warm gateway matching 'zzzz' (see 'isoagent gateway list')\n"
    )
    neither = run_cli(["gateway", "stop"], {}, cwd=tmp_path)
    assert neither.returncode == 2 and "or --all" in neither.stderr


# In a network namespace of its own: the abstract sockets there are the script's alone, so
# --all stops its two gateways and none of the machine's (other tests', other users')
ALL_SCRIPT = """
import json, os, subprocess, sys, time
from isoagent.parent.daemon import peers
cli = [sys.executable, "-m", "isoagent", "gateway"]
gateways = []
for key in ("key-a", "key-b"):
    env = {**os.environ, "ANTHROPIC_API_KEY": key}
    daemon = [sys.executable, "-P", "-m", "isoagent.parent.daemon"]
    gateways.append(subprocess.Popen(daemon, env=env))
deadline = time.monotonic() + 60
while len(peers.listening()) < 2 and time.monotonic() < deadline:
    time.sleep(0.05)
before = json.loads(subprocess.run([*cli, "list", "--json"], capture_output=True).stdout)
stopped = subprocess.run([*cli, "stop", "--all"], capture_output=True, text=True)
codes = [g.wait(timeout=120) for g in gateways]  # a gateway may still import the SDK
after = subprocess.run([*cli, "list"], capture_output=True, text=True)
print(json.dumps({"before": [g["pid"] for g in before], "pids": [g.pid for g in gateways],
                  "stopped": stopped.stdout, "codes": codes, "after": after.stderr}))
"""


def in_a_network_of_its_own(script: str, tmp_path: Path, timeout: float) -> dict[str, Any]:
    """What ``script`` prints (JSON), run in a network namespace of its own: the abstract
    sockets of the daemons it starts are nobody else's, and it sees no other daemon."""
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode:
        pytest.skip("no network namespace of our own to start daemons in (unshare -n)")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        warm.IDLE_VARIABLE: "60",
    }
    done = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", script],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    seen: dict[str, Any] = json.loads(done.stdout)
    return seen


def test_gateway_stop_all_ends_every_one(tmp_path: Path) -> None:
    seen = in_a_network_of_its_own(ALL_SCRIPT, tmp_path, 120)
    assert sorted(seen["before"]) == sorted(seen["pids"])
    stopped = seen["stopped"].splitlines()
    assert len(stopped) == 2 and all(" stopped (pid " in line for line in stopped)
    assert seen["codes"] == [0, 0]  # each exited by itself
    assert seen["after"] == "isoagent: no warm gateway is running\n"


BOUND_SCRIPT = """
import json, os, subprocess, sys, time
from isoagent.parent.daemon import peers
def start(key, **more):
    env = {**os.environ, "ANTHROPIC_API_KEY": key, **more}
    return subprocess.Popen([sys.executable, "-P", "-m", "isoagent.parent.daemon"], env=env)
def pids():
    found = peers.running()
    for daemon in found:
        daemon.close()
    return sorted(d.status.pid for d in found)
first = start("key-a")
while len(pids()) < 1:
    time.sleep(0.05)
time.sleep(1)  # the first is the longest idle
second = start("key-b")
while len(pids()) < 2:
    time.sleep(0.05)
third = start("key-c", ISOAGENT_WARM_DAEMONS="2")
code = first.wait(timeout=180)  # its gateway may still be importing the SDK, under load
while third.pid not in pids():
    time.sleep(0.05)
print(json.dumps({"code": code, "left": pids(), "second": second.pid, "third": third.pid}))
subprocess.run([sys.executable, "-m", "isoagent", "gateway", "stop", "--all"], capture_output=True)
second.wait(timeout=30)
third.wait(timeout=30)
"""


def test_starting_one_daemon_too_many_stops_the_longest_idle(tmp_path: Path) -> None:
    seen = in_a_network_of_its_own(BOUND_SCRIPT, tmp_path, 400)
    assert seen["code"] == 0  # the first left by itself, asked to
    assert seen["left"] == sorted([seen["second"], seen["third"]])
