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

Connections are a pool the children share: at most ``pool`` at once (a quarter of the
parent's open files, as each takes two: the child's and the host's), each child's share
the pool divided among the children it serves, so it grows and shrinks with their number.
A connection past a child's share is answered 503 and closed, and the child may open it
again once it holds fewer (or fewer children share the pool); when the pool is full, a
child within its share takes one from a child past it. Each child has a budget too:
``MAX_CONNECTIONS`` open at once, ``HEAD_SECONDS`` from a connection's accept to the end of
its request head, ``connection_seconds`` for the whole connection. A child that opens one
more connection than ``MAX_CONNECTIONS`` is cut off (its listener and its connections
closed) and named to ``on_over_budget``, which ends it. Everything runs on one event loop
in one thread of the proxy's own, beside a few threads that look names up: what the proxy
holds grows with the connections it allows, and never with what a child asks for; a
listener whose accept finds no file to spare waits and accepts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import resource
import shutil
import socket
import struct
import tempfile
import threading
import urllib.parse
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from isoagent.child.agent.tools.web import NotAllowed, allowed_address

HEAD_LIMIT = 65536  # bytes of request line and headers
MAX_CONNECTIONS = 32  # a child's connections open at once; one more ends the child
FILES_PER_POOL = 4  # the pool takes at most a quarter of the parent's open files
MAX_POOL = 1024  # connections at once, for every child together, however many files
HEAD_SECONDS = 10.0  # from a connection's accept to the end of its request head
CONNECTION_SECONDS = 600.0  # a whole connection, unless the proxy is given the children's
CONNECT_SECONDS = 30.0  # to reach the host, its name looked up
LOOKUP_THREADS = 4  # name lookups at once, for every child together
LOOKUPS_PER_CHILD = 2  # so one child's slow names leave the others a thread
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")
_DROPPED = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive")


@dataclass(frozen=True)
class EgressPolicy:
    allowed_domains: tuple[str, ...] = ()  # (): every public host
    local_hosts: tuple[str, ...] = ()  # may be reached at private addresses

    def address(self, host: str, port: int) -> tuple[Any, ...]:
        """Where to connect to reach ``host`` (``getaddrinfo``'s family, type, proto, name,
        sockaddr), checked here; ``NotAllowed``, ``OSError``."""
        return allowed_address(host.strip("[]"), port, self.allowed_domains, self.local_hosts)


@dataclass(eq=False)  # each one itself, in the set of the pool's sharers
class _Child:
    """What the proxy holds for one hand-over: the listener, its connections."""

    pid: int  # who handed it over (the kernel's word: SO_PEERCRED)
    listener: socket.socket
    connections: set[asyncio.Task[None]] = field(default_factory=set)
    lookups: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(LOOKUPS_PER_CHILD))


class EgressProxy:
    """The proxy, serving from a thread of its own until ``close``; ``path``: its Unix
    socket, in a folder only this user may enter. ``on_refused(host, why)`` is told of
    each request it refuses, ``on_over_budget(pid, why)`` of each child (by the pid that
    handed its listener over) it cut off; both from that thread."""

    def __init__(
        self,
        policy: EgressPolicy,
        on_refused: Callable[[str, str], None],
        connection_seconds: float = CONNECTION_SECONDS,
        pool: int = 0,
    ) -> None:
        """``pool``: connections at once for every child together (0: ``pool_size()``)."""
        self.policy = policy
        self.pool = pool or pool_size()
        self._children: set[_Child] = set()  # those served: the pool's sharers
        self.on_refused = on_refused
        self.on_over_budget: Callable[[int, str], None] = lambda pid, why: None
        self.connection_seconds = connection_seconds
        self._folder = tempfile.mkdtemp(prefix="isoagent-egress-")
        self.path = os.path.join(self._folder, "proxy.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(self.path)
        server.listen(128)
        server.setblocking(False)
        self._lookups = ThreadPoolExecutor(LOOKUP_THREADS, thread_name_prefix="egress-lookup")
        self._loop = asyncio.new_event_loop()
        self._closing = self._loop.create_future()
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(
            target=self._loop.run_until_complete,
            args=(self._serve(server),),
            daemon=True,
            name="egress-proxy",
        )
        self._thread.start()

    def close(self) -> None:
        """Stop taking children; close every listener and connection."""
        with contextlib.suppress(RuntimeError):  # its loop ended already
            self._loop.call_soon_threadsafe(_settle, self._closing)
        self._thread.join()
        self._loop.close()
        self._lookups.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(self._folder, ignore_errors=True)

    async def _serve(self, server: socket.socket) -> None:
        """Take each child's hand-over until ``close``, then end everything."""
        with server:
            self._start(self._take_children(server))
            await self._closing
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _start(
        self, work: Coroutine[Any, Any, None], *also: set[asyncio.Task[None]]
    ) -> asyncio.Task[None]:
        """``work`` as a task that ``close`` ends, held in ``also`` too while it runs."""
        task = asyncio.ensure_future(work)
        for tasks in (self._tasks, *also):
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        return task

    async def _take_children(self, server: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                link, _ = await loop.sock_accept(server)
            except OSError:  # a child gone before its turn, or no file to spare: the next
                await asyncio.sleep(0.1)
                continue
            self._start(self._child(link))

    async def _child(self, link: socket.socket) -> None:
        """One child's link: take its listener, serve it until the link ends."""
        loop = asyncio.get_running_loop()
        with link:
            try:
                async with asyncio.timeout(HEAD_SECONDS):
                    await _readable(link)
                _, fds, _, _ = socket.recv_fds(link, 1, 1)
            except OSError:  # TimeoutError included
                return
            listener = _listener(fds[0]) if fds else None
            if listener is None:
                return
            child = _Child(_peer_pid(link), listener)
            self._children.add(child)
            accepting = self._start(self._accept(child))
            try:
                with contextlib.suppress(OSError):
                    while await loop.sock_recv(link, 64):  # until the child exits
                        pass
            finally:
                self._children.discard(child)
                accepting.cancel()
                await asyncio.gather(accepting, return_exceptions=True)
                _close_listener(listener)

    async def _accept(self, child: _Child) -> None:
        """Serve each connection the child's listener accepts, within its budget and its
        share of the pool."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(child.listener)
            except OSError as exc:
                if exc.errno not in _NO_ROOM:
                    return  # its listener is closed: the child has gone
                await asyncio.sleep(0.1)  # no file to spare now: the connection waits
                continue
            if len(child.connections) >= MAX_CONNECTIONS:
                conn.close()
                self._cut_off(
                    child,
                    f"opened more than {MAX_CONNECTIONS} connections to the egress proxy at "
                    "once (the per-child budget)",
                )
                return
            if refused := self._no_room(child):
                _refuse(conn, refused)
                self.on_refused("", refused)
                continue
            self._start(self._connection(child, conn), child.connections)

    def share(self) -> int:
        """What one child may hold of the pool now: its part among the children served."""
        return min(MAX_CONNECTIONS, max(1, self.pool // max(len(self._children), 1)))

    def _no_room(self, child: _Child) -> str:
        """Why the pool has no room for one more connection of ``child`` ("": it has, once
        a child past its share gave one back)."""
        share = self.share()
        held = len(child.connections)
        if held >= share:
            return (
                f"a child holds its share of the proxy's connections ({held}: {self.pool} "
                f"shared by {len(self._children)} children); it may open more as it closes some"
            )
        if sum(len(c.connections) for c in self._children) < self.pool:
            return ""
        greedy = max(self._children, key=lambda c: len(c.connections))
        if len(greedy.connections) > share:  # one over its share gives one back
            next(iter(greedy.connections)).cancel()
        return ""

    def _cut_off(self, child: _Child, why: str) -> None:
        """The child broke its budget: nothing more of it is served, and it is named."""
        _close_listener(child.listener)
        for task in child.connections:
            task.cancel()
        self.on_over_budget(child.pid, why)

    async def _connection(self, child: _Child, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the child went away, or its time is up
            async with asyncio.timeout(self.connection_seconds):
                reader, writer = await asyncio.open_connection(sock=conn, limit=HEAD_LIMIT)
                async with _closing(writer):
                    await self._handle(child, reader, writer)

    async def _handle(
        self, child: _Child, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            async with asyncio.timeout(HEAD_SECONDS):
                head = await _read_head(reader)
            method, host, port, request = _parse(head)
        except _BadRequest as exc:
            await _answer(writer, 400, str(exc))
            return
        except TimeoutError:
            await _answer(writer, 408, f"no request head within {HEAD_SECONDS:g} s")
            return
        try:
            async with child.lookups:
                address = await asyncio.get_running_loop().run_in_executor(
                    self._lookups, self.policy.address, host, port
                )
            up_reader, up_writer = await _connect(address)
        except NotAllowed as exc:
            self.on_refused(host, str(exc))
            await _answer(writer, 403, str(exc))
            return
        except (OSError, UnicodeError) as exc:
            await _answer(writer, 502, f"cannot reach {host}:{port}: {exc or 'timed out'}")
            return
        async with _closing(up_writer):
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(request)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


_NO_ROOM = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def pool_size() -> int:
    """Connections at once for every child together: a quarter of the open files this
    process may have (each connection takes two), at most ``MAX_POOL``."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = soft if soft != resource.RLIM_INFINITY else MAX_POOL * FILES_PER_POOL
    return max(1, min(MAX_POOL, files // FILES_PER_POOL))


def _refuse(conn: socket.socket, why: str) -> None:
    """Answer a connection there is no room for with a 503, and close it."""
    with conn, contextlib.suppress(OSError):
        conn.setblocking(False)
        conn.send(_error(503, why))


class _BadRequest(Exception):
    pass


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """The request line and headers; what follows stays in ``reader``."""
    try:
        return (await reader.readuntil(b"\r\n\r\n"))[:-4]
    except asyncio.IncompleteReadError:
        raise _BadRequest("the request ended before its headers") from None
    except asyncio.LimitOverrunError:
        raise _BadRequest("request headers too long") from None


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


async def _answer(writer: asyncio.StreamWriter, status: int, why: str) -> None:
    """An error response."""
    writer.write(_error(status, why))
    with contextlib.suppress(OSError):
        await writer.drain()


def _error(status: int, why: str) -> bytes:
    """An error response; ``why`` is its reason phrase too (what ``curl -v`` and Python's
    tunnel error show)."""
    reason = re.sub(r"[^\x20-\x7e]", "?", why)
    body = f"isoagent egress proxy: {reason}\n".encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


async def _connect(address: tuple[Any, ...]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``address`` (``getaddrinfo``'s), within ``CONNECT_SECONDS``."""
    family, kind, proto, _, sockaddr = address
    upstream = socket.socket(family, kind, proto)
    upstream.setblocking(False)
    try:
        async with asyncio.timeout(CONNECT_SECONDS):
            await asyncio.get_running_loop().sock_connect(upstream, sockaddr)
        return await asyncio.open_connection(sock=upstream)
    except BaseException:
        upstream.close()
        raise


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Bytes from ``source`` to ``sink``, then its end (a half-close) too."""
    with contextlib.suppress(OSError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    with contextlib.suppress(OSError):
        if sink.can_write_eof():
            sink.write_eof()


@contextlib.asynccontextmanager
async def _closing(writer: asyncio.StreamWriter) -> AsyncIterator[None]:
    """``writer``'s connection closed on the way out: once its last bytes are sent, or at
    once on an error or a cancel (its peer may never read them)."""
    try:
        yield
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    finally:
        writer.transport.abort()


async def _readable(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(sock, _settle, ready)
    try:
        await ready
    finally:
        loop.remove_reader(sock)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _listener(fd: int) -> socket.socket | None:
    """The listening socket a child handed over, if it is one on IPv4 TCP."""
    try:
        listener = socket.socket(fileno=fd)
    except OSError:
        os.close(fd)
        return None
    if listener.type != socket.SOCK_STREAM or listener.family != socket.AF_INET:
        listener.close()
        return None
    listener.setblocking(False)
    return listener


def _peer_pid(link: socket.socket) -> int:
    """The pid of the process at the other end of a Unix socket (0: unknown)."""
    try:
        credentials = link.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    except OSError:
        return 0
    return int(struct.unpack("3i", credentials)[0])


def _close_listener(listener: socket.socket) -> None:
    with contextlib.suppress(OSError):
        listener.shutdown(socket.SHUT_RDWR)
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
