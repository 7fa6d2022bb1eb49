"""A hostile child with ``--child-network on`` beside honest ones: whatever it does to its
way out (the parent's egress proxy), the parent stays up and bounded, and its siblings
finish; and what files a child and the parent may hold.

The site stands on 127.0.0.2, reached through the proxy as in ``test_egress_proxy.py``.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from isoagent.parent.children.egress_proxy import MAX_CONNECTIONS
from isoagent.parent.children.sandbox_policy import mount_namespaces_available
from isoagent.parent.cli.exit_codes import ExitCode
from tests.conftest import cli_env
from tests.support.cli import ISOAGENT, read_jsonl
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.test_egress_proxy import LET_OUT, SITE_HOST, Site, fetch

# a child's network namespace needs what its mount namespace does: root, or user namespaces
needs_namespaces = pytest.mark.skipif(
    not mount_namespaces_available(), reason="children get no network namespace here"
)

# a child's bash: 1,100 connections to its proxy, each an unfinished request head, held
FLOOD = """
import os, socket, time, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
held, failed = [], 0
for _ in range(1100):
    try:
        s = socket.create_connection((proxy.hostname, proxy.port), timeout=5)
        s.sendall(b"GET http://a")
        held.append(s)
    except OSError:
        failed += 1
print("held", len(held), "failed", failed, flush=True)
time.sleep(60)
"""


def open_files_limit(soft: int, hard: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def sample_until_exit(cli: subprocess.Popen[str], seconds: float) -> tuple[int, int]:
    """The most open files and threads ``cli`` had, sampled until it exits (or ``seconds``)."""
    files = threads = 0
    deadline = time.monotonic() + seconds
    while cli.poll() is None and time.monotonic() < deadline:
        files = max(files, count(f"/proc/{cli.pid}/fd"))
        threads = max(threads, count(f"/proc/{cli.pid}/task"))
        time.sleep(0.01)
    return files, threads


def count(folder: str) -> int:
    try:
        return len(os.listdir(folder))
    except OSError:  # it ended
        return 0


@dataclass
class NetworkBatch:
    records: dict[str, dict[str, Any]]  # the -o lines, by id
    files: int  # the CLI's most open files
    threads: int  # and threads
    returncode: int
    stderr: str


def network_batch(
    server: MessagesServer, tmp_path: Path, prompts: list[str], bash: Callable[[str, str], str],
    open_files: int,
) -> NetworkBatch:  # fmt: skip
    """``isoagent batch`` of a task per prompt (its id), all at once, with the proxy letting
    children reach the site, under ``ulimit -n open_files``: each child runs ``bash(prompt,
    the site's URL)`` and answers ``SAW`` and its output's lines."""

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("Bash", {"command": bash(req.first_user_text, url)})
        lines = req.tool_results[0]["content"].strip().splitlines()
        return text_reply("SAW " + " | ".join(lines))

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": p, "prompt": p}) + "\n" for p in prompts))
    out = tmp_path / "out.jsonl"
    with Site() as site:
        url = f"http://{SITE_HOST}:{site.port}/"
        server.handler = handler  # type: ignore[assignment]
        jobs = str(len(prompts))
        cli = subprocess.Popen(
            [*ISOAGENT, "batch", str(tasks), "-o", str(out), "-j", jobs, *LET_OUT],
            # no warm daemon: the parent is this process, under this file limit, not a
            # daemon that an earlier command started under another
            env=cli_env(server, HOME=str(tmp_path / "home"), ISOAGENT_DAEMON="0"),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: open_files_limit(open_files, open_files),
        )
        files, threads = sample_until_exit(cli, 120)
        if cli.poll() is None:
            cli.kill()
        _, stderr = cli.communicate()
    records = {r["id"]: r for r in read_jsonl(out)}
    return NetworkBatch(records, files, threads, cli.returncode, stderr)


@needs_namespaces
def test_a_child_flooding_its_proxy_is_ended_and_its_siblings_finish(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    def bash(prompt: str, url: str) -> str:
        if prompt == "flood":
            return f"{sys.executable} -c {shlex.quote(FLOOD)}"
        return f"sleep 2; {fetch(url + prompt)}"  # an honest task: a page, mid-flood

    honest = [f"honest{n}" for n in range(3)]
    done = network_batch(api_server, tmp_path, ["flood", *honest], bash, 1024)
    assert done.files < 256 and done.threads < 64, (done.files, done.threads)
    assert done.returncode == ExitCode.TASKS_FAILED, done.stderr  # the flooding one
    assert sorted(done.records) == ["flood", *honest], done.stderr
    for name in honest:
        assert done.records[name]["status"] == "ok"
        assert done.records[name]["summary"] == f"SAW page /{name}"
    flood = done.records["flood"]
    assert flood["status"] == "error"
    budget = f"more than {MAX_CONNECTIONS} connections to the egress proxy at once"
    assert budget in flood["error"]


# a child's bash: 31 connections to its proxy (one fewer than ends a child), each an
# unfinished request head, held while its siblings fetch; those answered at once (503) are
# counted; then it lets them go and fetches a page of its own
HOARD = """
import os, socket, sys, time, urllib.parse, urllib.request
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
held = []
for _ in range(31):
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=5)
    s.sendall(b"GET http://a")
    held.append(s)
time.sleep(1)
refused = 0
for s in held:
    s.settimeout(0.2)
    try:
        refused += s.recv(12).startswith(b"HTTP/1.1 503")
    except TimeoutError:
        pass
time.sleep(4)
for s in held:
    s.close()
time.sleep(2)
try:
    page = urllib.request.urlopen(sys.argv[1], timeout=20).read().decode()
except Exception as e:
    page = f"FAILED {e}"
print(f"refused {refused}, then {page}", flush=True)
"""


@needs_namespaces
def test_children_hoarding_proxy_connections_leave_their_siblings_a_share(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """Six children each hold 31 connections under a limit of 160 open files: the pool (a
    quarter of them) is shared, so past its share each hoarder's connections are answered
    503, its honest siblings fetch during the flood and after it, and each hoarder gets its
    connections back once it lets the others go; nobody is ended, the parent's files stay
    within its limit."""

    def bash(prompt: str, url: str) -> str:
        if prompt.startswith("hoard"):
            return f"{sys.executable} -c {shlex.quote(HOARD)} {url}{prompt}"
        # an honest task: a page mid-flood, and one after it
        return f"sleep 2; {fetch(url + prompt)}; sleep 10; {fetch(url + prompt + '-after')}"

    hoarders, honest = [f"hoard{n}" for n in range(6)], ["honest0", "honest1"]
    done = network_batch(api_server, tmp_path, [*hoarders, *honest], bash, 160)
    for name in honest:
        said = done.records[name]["summary"]
        assert said == f"SAW page /{name} | page /{name}-after", said
    assert done.returncode == 0, done.stderr
    assert done.files < 160, done.files
    refused = 0
    for name in hoarders:
        said = done.records[name]["summary"]
        assert said.endswith(f"then page /{name}"), said
        refused += int(said.split()[2].rstrip(","))
    assert refused > 0  # 6 x 31 connections, in a pool of 40
    share = "warning: the egress proxy refused a child's connection: a child holds its share"
    assert share in done.stderr


def test_a_child_gets_a_bounded_file_limit_and_the_parent_its_own_hard_one(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """The CLI starts with a soft limit of 256 below a hard one of 8192: it raises its own
    to the hard one (a child's fork server inherits it), and the child holds at most
    ``CHILD_OPEN_FILES``, soft and hard, whatever the parent has."""
    from isoagent.child.sandbox.limits import CHILD_OPEN_FILES

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("Bash", {"command": "echo soft $(ulimit -Sn) hard $(ulimit -Hn)"})
        return text_reply(req.tool_results[0]["content"].strip())

    api_server.handler = handler  # type: ignore[assignment]
    done = subprocess.run(
        [*ISOAGENT, "task", "go"],
        env=cli_env(api_server, HOME=str(tmp_path / "home")),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: open_files_limit(256, 8192),
    )
    assert done.returncode == 0, done.stderr
    limit = min(CHILD_OPEN_FILES, 8192)
    assert done.stdout.strip() == f"soft {limit} hard {limit}"
