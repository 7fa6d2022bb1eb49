"""The children's way out with ``--child-network on``: an HTTP proxy in the parent that
lets through only the hosts ``--allowed-domains`` names (any, without it), and only at
public addresses unless ``--allow-local-fetch`` names the host.

A child's network namespace holds only loopback. Before it confines itself, the child
listens on 127.0.0.1 there and hands the listener over through this proxy's Unix
socket (``child/sandbox/egress.py``); the proxy accepts the child's connections in the
child's own namespace, so nothing of the host's network is in the child's reach but
what the proxy relays. It speaks ``CONNECT host:port`` (https, relayed as bytes) and
absolute-form ``http://`` requests. Names are resolved here (the child has no DNS),
every address checked, and the connection made to the checked address, so a second
lookup cannot rebind it. A child's listener closes when its end of the hand-over link
does: when it exits.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from isoagent.child.agent.tools.web import NotAllowed, allowed_address

HEAD_LIMIT = 65536  # bytes of request line and headers
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")
_DROPPED = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive")


@dataclass(frozen=True)
class EgressPolicy:
    allowed_domains: tuple[str, ...] = ()  # (): every public host
    local_hosts: tuple[str, ...] = ()  # may be reached at private addresses

    def connect(self, host: str, port: int) -> socket.socket:
        """A connection to ``host`` at an address checked here; ``NotAllowed``, ``OSError``."""
        family, kind, proto, _, address = allowed_address(
            host.strip("[]"), port, self.allowed_domains, self.local_hosts
        )
        upstream = socket.socket(family, kind, proto)
        upstream.settimeout(30)
        try:
            upstream.connect(address)
        except OSError:
            upstream.close()
            raise
        upstream.settimeout(None)
        return upstream


class EgressProxy:
    """The proxy, serving from threads of its own until ``close``; ``path``: its Unix
    socket, in a folder only this user may enter. ``on_refused(host, why)`` is told of
    each request it refuses, from those threads."""

    def __init__(self, policy: EgressPolicy, on_refused: Callable[[str, str], None]) -> None:
        self.policy = policy
        self.on_refused = on_refused
        self._folder = tempfile.mkdtemp(prefix="isoagent-egress-")
        self.path = os.path.join(self._folder, "proxy.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(128)
        self._listeners: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread(self._accept, self._server, self._child)

    def close(self) -> None:
        """Stop taking children; close every listener (connections under way finish)."""
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        with self._lock:
            listeners, self._listeners = self._listeners, set()
        for listener in listeners:
            _close_listener(listener)
        shutil.rmtree(self._folder, ignore_errors=True)

    @staticmethod
    def _thread(target: Callable[..., object], *args: object) -> None:
        threading.Thread(target=target, args=args, daemon=True, name="egress-proxy").start()

    def _accept(self, server: socket.socket, serve: Callable[[socket.socket], None]) -> None:
        """Serve each connection ``server`` accepts in a thread of its own, until it closes."""
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            self._thread(serve, conn)

    def _child(self, link: socket.socket) -> None:
        """One child's link: take its listener, serve it until the link ends."""
        with link:
            try:
                _, fds, _, _ = socket.recv_fds(link, 1, 1)
            except OSError:
                return
            if not fds:
                return
            try:
                listener = socket.socket(fileno=fds[0])
            except OSError:
                os.close(fds[0])
                return
            if listener.type != socket.SOCK_STREAM or listener.family != socket.AF_INET:
                listener.close()
                return
            with self._lock:
                self._listeners.add(listener)
            self._thread(self._accept, listener, self._handle)
            with contextlib.suppress(OSError):
                while link.recv(64):  # until the child exits
                    pass
            with self._lock:
                self._listeners.discard(listener)
            _close_listener(listener)

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(60)
            try:
                head, rest = _read_head(conn)
                method, host, port, request = _parse(head)
            except _BadRequest as exc:
                _answer(conn, 400, str(exc))
                return
            except OSError:
                return
            try:
                upstream = self.policy.connect(host, port)
            except NotAllowed as exc:
                self.on_refused(host, str(exc))
                _answer(conn, 403, str(exc))
                return
            except (OSError, UnicodeError) as exc:
                _answer(conn, 502, f"cannot reach {host}:{port}: {exc}")
                return
            conn.settimeout(None)
            with upstream, contextlib.suppress(OSError):  # the child went away
                if method == "CONNECT":
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    upstream.sendall(rest)
                else:
                    upstream.sendall(request + rest)
                _relay(conn, upstream)


class _BadRequest(Exception):
    pass


def _read_head(conn: socket.socket) -> tuple[bytes, bytes]:
    """The request line and headers, and what came after them."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise _BadRequest("the request ended before its headers")
        data += chunk
        if len(data) > HEAD_LIMIT:
            raise _BadRequest("request headers too long")
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _parse(head: bytes) -> tuple[str, str, int, bytes]:
    """(method, host, port, the request to send on for an http:// one)."""
    line, *headers = head.split(b"\r\n")
    try:
        method, target, version = line.decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        raise _BadRequest("not an HTTP request") from None
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        path = ""
    else:
        url = urllib.parse.urlsplit(target)
        if url.scheme != "http" or not url.netloc:
            raise _BadRequest("only CONNECT and absolute http:// requests go through")
        host, port = url.netloc.rpartition("@")[2], "80"
        if re.search(r":\d+$", host):
            host, _, port = host.rpartition(":")
        path = urllib.parse.urlunsplit(("", "", url.path or "/", url.query, ""))
    if not _HOST.fullmatch(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise _BadRequest(f"not a host and port: {target}")
    kept = [h for h in headers if h.split(b":", 1)[0].strip().lower() not in _DROPPED]
    request = b"\r\n".join(
        [f"{method} {path} {version}".encode(), *kept, b"Connection: close", b"", b""]
    )
    return method, host, int(port), request


def _answer(conn: socket.socket, status: int, why: str) -> None:
    """An error response; ``why`` is its reason phrase too (what ``curl -v`` and Python's
    tunnel error show)."""
    reason = re.sub(r"[^\x20-\x7e]", "?", why)
    body = f"isoagent egress proxy: {reason}\n".encode()
    with contextlib.suppress(OSError):
        conn.sendall(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )


def _relay(a: socket.socket, b: socket.socket) -> None:
    other = threading.Thread(target=_pipe, args=(b, a), daemon=True, name="egress-proxy")
    other.start()
    _pipe(a, b)
    other.join()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _close_listener(listener: socket.socket) -> None:
    with contextlib.suppress(OSError):
        listener.shutdown(socket.SHUT_RDWR)  # wakes its accept
    listener.close()


def once_per_host(warn: Callable[[str], None]) -> Callable[[str, str], None]:
    """An ``on_refused`` that warns the user of the first refusal for each host."""
    said: set[str] = set()
    lock = threading.Lock()

    def refused(host: str, why: str) -> None:
        with lock:
            if host in said:
                return
            said.add(host)
        warn(f"warning: the egress proxy refused a child's connection: {why}")

    return refused
