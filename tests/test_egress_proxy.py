"""``--child-network on``: a child's only way out is the parent's egress proxy, which lets
through the hosts ``--allowed-domains`` names at addresses it allows, and nothing else.

The site stands on 127.0.0.2 (loopback: every test stays on this machine); children
reach it as a host elsewhere, through the proxy, since their own 127.0.0.2 is their
namespace's. ``--allow-local-fetch 127.0.0.2`` lets the proxy reach it though it is not
a public address, as an intranet's name would be let through.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from isoagent.child.agent.tools.web import NotAllowed, allowed_address, domain_allowed
from isoagent.parent.children import egress_proxy
from isoagent.parent.children.egress_proxy import MAX_CONNECTIONS, EgressPolicy, EgressProxy
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.support.processes import wait_for
from tests.support.scripts import child_runs

SITE_HOST = "127.0.0.2"
LET_OUT = ["--allowed-domains", SITE_HOST, "--allow-local-fetch", SITE_HOST]


class Site(http.server.ThreadingHTTPServer):
    """Answers every GET with ``page <path>``, noting the paths it served; serving from a
    thread while used as a context manager."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.paths.append(self.path)
                body = f"page {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("0.0.0.0", 0), Handler)
        self.port = self.server_address[1]

    def __enter__(self) -> Site:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture
def site() -> Iterator[Site]:
    with Site() as server:
        yield server


def fetch(url: str) -> str:
    """A command printing what urllib (which honours HTTP_PROXY) gets, or its error."""
    code = (
        "import urllib.request as u\n"
        f"try: print(u.urlopen({url!r}, timeout=20).read().decode())\n"
        "except Exception as e: print('FAILED', e)\n"
    )
    return f"{sys.executable} -c {shlex.quote(code)} 2>&1"


def run(api_server: MessagesServer, tmp_path: Path, command: str, *options: str) -> str:
    api_server.handler = child_runs("general-purpose", command)
    done = run_cli(["run", "go", *options], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_a_child_reaches_an_allowed_host_through_the_proxy(
    api_server: MessagesServer, tmp_path: Path, site: Site
) -> None:
    out = run(api_server, tmp_path, fetch(f"http://{SITE_HOST}:{site.port}/notes"), *LET_OUT)
    assert "page /notes" in out
    assert site.paths == ["/notes"]


def test_the_proxy_is_reached_where_the_childs_own_mounts_would_cover_it(
    api_server: MessagesServer, tmp_path: Path, site: Site
) -> None:
    """A TMPDIR under /dev/shm puts the proxy's socket where a sandboxed child mounts a
    private tmpfs: the child hands its listener over before it mounts anything."""
    shm = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        command = fetch(f"http://{SITE_HOST}:{site.port}/shm")
        api_server.handler = child_runs("general-purpose", command)
        env = cli_env(api_server, TMPDIR=str(shm))
        done = run_cli(["run", "go", *LET_OUT], env, cwd=tmp_path, process=True)
        assert done.returncode == 0, done.stderr
        assert "page /shm" in done.stdout
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def test_a_tunnel_to_an_allowed_host_is_relayed(
    api_server: MessagesServer, tmp_path: Path, site: Site
) -> None:
    """CONNECT, as https goes: the proxy relays bytes it cannot read."""
    code = (
        "import http.client, os, urllib.parse\n"
        "p = urllib.parse.urlsplit(os.environ['HTTPS_PROXY'])\n"
        "c = http.client.HTTPConnection(p.hostname, p.port, timeout=20)\n"
        f"c.set_tunnel({SITE_HOST!r}, {site.port})\n"
        "c.request('GET', '/tunnel')\n"
        "print(c.getresponse().read().decode())\n"
    )
    out = run(api_server, tmp_path, f"{sys.executable} -c {shlex.quote(code)} 2>&1", *LET_OUT)
    assert "page /tunnel" in out
    assert site.paths == ["/tunnel"]


def test_a_host_not_in_the_allowed_domains_is_refused_and_said(
    api_server: MessagesServer, tmp_path: Path, site: Site
) -> None:
    other = "127.0.0.3"  # the same site, by a name the allow-list does not hold
    out = run(
        api_server, tmp_path, fetch(f"http://{other}:{site.port}/secret"), *LET_OUT,
        "--allow-local-fetch", other,
    )  # fmt: skip
    assert f"FAILED HTTP Error 403: {other} is not in --allowed-domains" in out
    assert "isoagent: warning: the egress proxy refused a child's connection" in out
    assert site.paths == []


def test_an_allowed_name_at_a_private_address_is_refused(
    api_server: MessagesServer, tmp_path: Path, site: Site
) -> None:
    """A public name pointed at the metadata service or the user's router stays out."""
    out = run(
        api_server,
        tmp_path,
        fetch(f"http://{SITE_HOST}:{site.port}/metadata"),
        "--allowed-domains",
        SITE_HOST,
    )
    assert f"{SITE_HOST} is at {SITE_HOST}, not a public address" in out
    assert site.paths == []


def test_a_child_cannot_go_around_the_proxy(
    api_server: MessagesServer, tmp_path: Path, site: Site
) -> None:
    """A direct connection, and one to an address the proxy holds for the host, reach
    nothing: the child's network holds only its own loopback."""
    code = (
        "import socket\n"
        f"try: socket.create_connection(({SITE_HOST!r}, {site.port}), 5); print('REACHED')\n"
        "except OSError as e: print('REFUSED', e)\n"
    )
    out = run(api_server, tmp_path, f"{sys.executable} -c {shlex.quote(code)} 2>&1", *LET_OUT)
    assert "REFUSED" in out and "REACHED" not in out
    assert site.paths == []


def test_the_parents_own_bash_goes_out_through_the_proxy_too(
    api_server: MessagesServer, tmp_path: Path, site: Site
) -> None:
    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply(
                "Bash",
                {"command": fetch(f"http://{SITE_HOST}:{site.port}/p") + "; "
                 + fetch(f"http://127.0.0.3:{site.port}/q")},
            )  # fmt: skip
        return text_reply(req.tool_results[0]["content"])

    api_server.handler = handler  # type: ignore[assignment]
    done = run_cli(["run", "go", *LET_OUT], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "page /p" in done.stdout and "127.0.0.3 is not in --allowed-domains" in done.stdout
    assert site.paths == ["/p"]


@pytest.mark.parametrize(
    ("host", "seen"),
    [(SITE_HOST, "page /fetched"), ("127.0.0.3", "HTTP 403 127.0.0.3 is not in --allowed-domains")],
)
def test_web_fetch_in_a_child_goes_through_the_proxy(
    api_server: MessagesServer, tmp_path: Path, site: Site, host: str, seen: str
) -> None:
    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn == 0:
                return tool_reply(
                    "Agent", {"description": "f", "prompt": "f", "subagent_type": "fetcher"}
                )
            return text_reply(req.tool_results[0]["content"])
        if req.turn == 0:
            return tool_reply(
                "WebFetch", {"url": f"http://{host}:{site.port}/fetched", "prompt": "p"}
            )
        return text_reply("CHILD SAW: " + req.tool_results[0]["content"])

    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "fetcher.md").write_text(
        "---\nname: fetcher\ndescription: fetches\ntools: WebFetch\n---\nFetch.\n"
    )
    api_server.handler = handler  # type: ignore[assignment]
    done = run_cli(["run", "go", *LET_OUT], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert seen in done.stdout
    assert site.paths == (["/fetched"] if host == SITE_HOST else [])


def test_an_sdk_sandboxs_allowed_domains_are_the_proxys(
    api_server: MessagesServer, tmp_path: Path, site: Site
) -> None:
    """The SDK's ``sandbox`` option, sent in ``--settings``, as Claude Code reads it."""
    sandbox = {"enabled": True, "network": {"allowedDomains": [SITE_HOST]}}
    api_server.handler = child_runs(
        "general-purpose",
        fetch(f"http://{SITE_HOST}:{site.port}/ok")
        + "; "
        + fetch(f"http://127.0.0.3:{site.port}/no"),
    )
    args = ["-p", "go", "--settings", json.dumps({"sandbox": sandbox})]
    done = run_cli([*args, "--allow-local-fetch", SITE_HOST], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "page /ok" in done.stdout and "127.0.0.3 is not in --allowed-domains" in done.stdout
    assert site.paths == ["/ok"]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--child-network", "host"], "--allowed-domains needs --child-network on"),
        (["--hosts", "h1"], "--child-network on needs children on this machine"),
    ],
)
def test_an_allow_list_that_could_not_hold_is_refused_before_any_call(
    api_server: MessagesServer, tmp_path: Path, options: list[str], said: str
) -> None:
    args = ["task", "x", *options, "--allowed-domains", "example.com"]
    done = run_cli(args, cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 2
    assert said in done.stderr
    assert api_server.requests == []


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("example.com", True),
        ("EXAMPLE.com.", True),
        ("api.example.com", False),
        ("docs.python.org", True),
        ("python.org", False),  # *.python.org: its subdomains, not itself
        ("evilpython.org", False),
        ("python.org.evil.com", False),
    ],
)
def test_allowed_domains_match_a_name_or_its_subdomains(host: str, allowed: bool) -> None:
    assert domain_allowed(host, ["example.com", "*.python.org"]) is allowed


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::7f00:1",  # NAT64, well-known prefix: 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64: the metadata service, 169.254.169.254
        "64:ff9b:1::a00:1",  # NAT64, local-use prefix: 10.0.0.1
        "64:ff9b:1::808:808",  # local-use: its IPv4 may sit anywhere, so never public
        "2002:7f00:1::",  # 6to4: 127.0.0.1
        "2002:a9fe:a9fe::",  # 6to4: 169.254.169.254
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo: client 192.0.2.45
        "::7f00:1",  # IPv4-compatible: 127.0.0.1
        "::ffff:0:7f00:1",  # SIIT, IPv4-translated: 127.0.0.1
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::ffff:a9fe:a9fe",  # IPv4-mapped: 169.254.169.254
    ],
)
def test_an_ipv6_address_carrying_a_refused_ipv4_one_is_refused(address: str) -> None:
    with pytest.raises(NotAllowed, match="not a public address"):
        allowed_address(address, 80, (), ())


@pytest.mark.parametrize(
    "address",
    [
        "2606:4700:4700::1111",  # a global IPv6 address
        "64:ff9b::808:808",  # NAT64 of a public IPv4 address (8.8.8.8)
        "2002:808:808::1",  # 6to4 of 8.8.8.8
        "::ffff:8.8.8.8",  # IPv4-mapped 8.8.8.8
    ],
)
def test_an_ipv6_address_carrying_a_public_ipv4_one_is_allowed(address: str) -> None:
    """Nothing is sent: the check resolves a literal address and says where to connect."""
    assert allowed_address(address, 80, (), ())[4][0] == address


def test_a_childs_listener_closes_when_the_child_exits(tmp_path: Path) -> None:
    """Nothing of a child outlives it in the proxy: its listener goes with it."""
    with serving(EgressPolicy()) as proxy, handed_over(proxy) as (child, port):
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass  # the proxy accepts it: the listener is the proxy's now
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
        assert wait_for(lambda: not listening("127.0.0.1", port), 10)


def test_a_child_over_its_connection_budget_is_cut_off_and_named() -> None:
    """One connection more than its budget: its listener and every connection of it
    close, and the proxy names it by the pid that handed the listener over."""
    told: list[tuple[int, str]] = []
    with serving(EgressPolicy()) as proxy, handed_over(proxy) as (child, port):
        proxy.on_over_budget = lambda pid, why: told.append((pid, why))
        held = [
            socket.create_connection(("127.0.0.1", port), timeout=10)
            for _ in range(MAX_CONNECTIONS + 1)
        ]
        assert wait_for(lambda: told, 10)
        why = f"opened more than {MAX_CONNECTIONS} connections to the egress proxy at once"
        assert told == [(child.pid, why + " (the per-child budget)")]
        assert all(connection.recv(1) == b"" for connection in held)
        assert not listening("127.0.0.1", port)
        for connection in held:
            connection.close()


def held_open(connection: socket.socket) -> bool:
    """Whether the proxy holds ``connection`` (no answer, no end within a moment)."""
    connection.settimeout(0.5)
    try:
        connection.recv(1)  # an answer, or its end (b""): not held
    except TimeoutError:
        return True
    except OSError:  # reset
        pass
    finally:
        connection.settimeout(10)
    return False


def test_the_pool_is_shared_by_the_children_its_proxy_serves() -> None:
    """Four connections for everyone: one child alone holds all four; when a second comes,
    each child's share is two, and the second takes one of the first's, which is answered
    503 past its share, not cut off; once the second has gone, the first opens them again."""
    told: list[str] = []
    with serving(EgressPolicy(), pool=4) as proxy, handed_over(proxy) as (_, first):
        proxy.on_refused = lambda host, why: told.append(why)
        held = [socket.create_connection(("127.0.0.1", first), timeout=10) for _ in range(4)]
        assert all(map(held_open, held))
        with handed_over(proxy) as (_, second):
            assert wait_for(lambda: proxy.share() == 2, 10)
            theirs = socket.create_connection(("127.0.0.1", second), timeout=10)
            assert held_open(theirs)
            assert sum(map(held_open, held)) == 3  # one of the first's gave room
            refused = socket.create_connection(("127.0.0.1", first), timeout=10)
            assert refused.recv(4096).startswith(b"HTTP/1.1 503 a child holds its share")
            assert wait_for(lambda: told, 10)
            assert told[0].startswith("a child holds its share of the proxy's")
        assert wait_for(lambda: proxy.share() == 4, 10)
        again = socket.create_connection(("127.0.0.1", first), timeout=10)
        assert held_open(again)  # its connections are back
        for connection in [*held, theirs, refused, again]:
            connection.close()


def test_a_request_head_that_never_ends_is_answered_408(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(egress_proxy, "HEAD_SECONDS", 0.2)
    with (
        serving(EgressPolicy()) as proxy,
        handed_over(proxy) as (_, port),
        socket.create_connection(("127.0.0.1", port), timeout=10) as connection,
    ):
        connection.sendall(b"GET http://a")
        assert connection.recv(4096).startswith(b"HTTP/1.1 408 no request head within 0.2 s")
        assert connection.recv(1) == b""


def test_a_tunnel_ends_at_the_connections_deadline(site: Site) -> None:
    policy = EgressPolicy((SITE_HOST,), (SITE_HOST,))
    with (
        serving(policy, connection_seconds=2) as proxy,
        handed_over(proxy) as (_, port),
        socket.create_connection(("127.0.0.1", port), timeout=10) as connection,
    ):
        connection.sendall(f"CONNECT {SITE_HOST}:{site.port} HTTP/1.1\r\n\r\n".encode())
        assert connection.recv(4096) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        assert connection.recv(1) == b""  # held idle: closed by the proxy, not the site


@contextlib.contextmanager
def serving(policy: EgressPolicy, **options: float) -> Iterator[EgressProxy]:
    proxy = EgressProxy(policy, lambda host, why: None, **options)
    try:
        yield proxy
    finally:
        proxy.close()


@contextlib.contextmanager
def handed_over(proxy: EgressProxy) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A process that hands a listener over to ``proxy``, as a child does, and lives
    until its stdin closes; and the listener's port."""
    child = subprocess.Popen(
        [sys.executable, "-c", HANDS_OVER, proxy.path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        yield child, int(child.stdout.readline())
    finally:
        child.kill()
        child.wait(timeout=30)


HANDS_OVER = """
import sys
from isoagent.child.sandbox import egress
url = egress.hand_over(sys.argv[1])["HTTP_PROXY"]
print(url.rsplit(":", 1)[1], flush=True)
sys.stdin.read()
"""


def listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=5):
            return True
    except OSError:
        return False
