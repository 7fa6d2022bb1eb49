"""The warm gateway: every model call of this user's invocations made by one process that
keeps the SDK imported.

``import anthropic`` is most of what a one-shot ``isoagent task`` costs (about a second of
CPU). The warm daemon (``parent/daemon/``) holds a gateway, a process forked from it that
answers ``ModelCall`` frames with ``ModelReply`` frames, one call per connection, with one
SDK client and one rate limiter for every invocation of its configuration: the daemon's
sessions, and processes that run a session themselves (the Python API, an invocation the
daemon could not take), which start the daemon if none runs.

- Per user and per configuration: the address is the daemon's (``daemon/address.py``: the
  uid, every ``ANTHROPIC_*`` variable, the proxy and certificate variables, the interpreter,
  the code and the process context), so a changed key, server or proxy gets a gateway of
  its own, and the key stays in the environment of the process that was given it.
- An abstract unix socket, answered only for peers of the same uid (``SO_PEERCRED``), and
  unreachable from sandboxed children (Landlock scopes abstract sockets, and a child with
  the network off has a network namespace of its own).
- ``ISOAGENT_WARM_GATEWAY=0`` turns it off: every invocation imports the SDK itself.
  A gateway that cannot be reached or started is reported once; the SDK is used in-process.
- ``isoagent gateway list|stop`` asks each daemon of this user for its ``GatewayStatus``
  (its gateway's calls, its sessions); a stopped one answers the calls it has, and takes no
  more.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import struct
import sys
import time
from typing import TYPE_CHECKING

import msgspec

from isoagent.parent.daemon import address as daemon_address
from isoagent.parent.daemon.client import IDLE_VARIABLE, START_SECONDS, VARIABLE, exited
from isoagent.parent.daemon.client import start as start_daemon
from isoagent.parent.model.gateway import ModelSource
from isoagent.parent.model.limiter import Waiting
from isoagent.parent.model.stream import listener as event_listener
from isoagent.protocol import (
    FrameError,
    ModelCall,
    ModelError,
    ModelReply,
    encode_frame,
)
from isoagent.protocol.framing import HEADER, check_length

if TYPE_CHECKING:
    from isoagent.parent.model.retry import RetryingSource, WaitSink

__all__ = ["IDLE_VARIABLE", "VARIABLE"]
FRAME_SECONDS = 10.0  # how long a connection may take to send its call: probes send none


class WarmCall(msgspec.Struct, tag=True):
    """An invocation's model call, and how long the gateway may retry it; ``partial``: send
    each of its streamed events too (``--include-partial-messages``)."""

    call: ModelCall
    deadline: float
    partial: bool = False


class StreamedEvent(msgspec.Struct, tag=True):
    """One event of the call's streamed answer, its JSON as the API sent it."""

    data: bytes


class StatusAsked(msgspec.Struct, tag=True):
    """``isoagent gateway list``: what the gateway is; answered with a ``GatewayStatus``."""


class StopAsked(msgspec.Struct, tag=True):
    """``isoagent gateway stop``: answered with a ``GatewayStatus``, then the gateway stops
    listening, answers the calls it has and exits."""


class GatewayStatus(msgspec.Struct, tag=True):
    """A daemon's (or its gateway's) status; ``isoagent gateway list`` tells daemons apart
    by what they serve: server, key, interpreter and code."""

    pid: int
    server: str  # its ANTHROPIC_BASE_URL; "": the SDK's default
    calls_served: int
    calls_running: int
    idle_seconds: float  # how long it stays with no call
    quiet_seconds: float = 0.0  # since its last call (or session) ended
    sessions_running: int = 0
    sessions_served: int = 0
    key: str = ""  # a digest of its API key or token, to tell two keys apart; "": none
    python: str = ""  # the interpreter's installation (sys.prefix)
    code: str = ""  # the digest of its address: configuration, code and context


# the gateway answers a WarmCall with a Waiting for each change of what the call waits on
# (the invocation says it on its stderr: the gateway has none), the streamed events if they
# were asked for, then the ModelReply
_requests = msgspec.msgpack.Decoder(WarmCall | StatusAsked | StopAsked)
_status = msgspec.msgpack.Decoder(GatewayStatus)
PREFIX = "isoagent-gateway-"  # of every gateway's address, then the uid and the digest
_answers_decoder = msgspec.msgpack.Decoder(ModelReply | Waiting | StreamedEvent)


def enabled(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    return environ.get(VARIABLE, "1") != "0"


def address(environ: os._Environ[str] | dict[str, str] = os.environ) -> str:
    """The abstract socket name of this user's gateway for this configuration."""
    return daemon_address.gateway_address(daemon_address.daemon_address(environ))


def _peer(sock: socket.socket) -> tuple[int, int]:
    """The pid and uid of the process at the other end of ``sock`` (``SO_PEERCRED``)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


def _same_user(sock: socket.socket) -> bool:
    return _peer(sock)[1] == os.getuid()


async def _read_frame(reader: asyncio.StreamReader, decoder: msgspec.msgpack.Decoder) -> object:
    length = check_length(await reader.readexactly(HEADER.size))
    body = await reader.readexactly(length)
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise FrameError(f"undecodable frame ({length} bytes): {exc}") from None


class WarmSource:
    """Model calls answered by the warm gateway at ``where``. One that has gone idle is
    started again; one that cannot be reached is said once, and the SDK in this process
    answers from then on."""

    def __init__(self, where: str, deadline: float, on_wait: WaitSink | None = None) -> None:
        self.where = where
        self.deadline = deadline
        self.on_wait = on_wait
        self._fallback: ModelSource | None = None
        self._restart = asyncio.Lock()  # concurrent calls start one gateway, not one each

    async def complete(self, call: ModelCall) -> ModelReply:
        if self._fallback is None:
            try:
                return await self._ask(call)
            except (OSError, asyncio.IncompleteReadError, FrameError, ValueError) as exc:
                from isoagent.parent.model.sdk import MissingCredentials

                _say(f"the warm gateway cannot be used ({exc}); importing the SDK here")
                try:
                    self._fallback = in_process(self.deadline, self.on_wait)
                except MissingCredentials as error:
                    return ModelReply(turn=call.turn, error=ModelError("connection", str(error)))
        return await self._fallback.complete(call)

    async def aclose(self) -> None:
        if self._fallback is not None:
            await self._fallback.aclose()

    async def _ask(self, call: ModelCall) -> ModelReply:
        reader, writer = await self._connect()
        hear = event_listener.get()
        try:
            if not _same_user(writer.get_extra_info("socket")):
                raise OSError("its address is held by another user's process")
            writer.write(encode_frame(WarmCall(call, self.deadline, hear is not None)))
            await writer.drain()
            while True:
                answer = await _read_frame(reader, _answers_decoder)
                if isinstance(answer, ModelReply):
                    return answer
                if isinstance(answer, StreamedEvent):
                    if hear is not None:
                        hear(answer.data)
                elif isinstance(answer, Waiting) and self.on_wait is not None:
                    self.on_wait(answer)
        finally:
            writer.close()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Connect; a gateway that has gone idle since is started again and waited for."""
        try:
            return await asyncio.open_unix_connection(self.where)
        except ConnectionRefusedError:
            async with self._restart:
                if not _answers(self.where):
                    why = await asyncio.to_thread(_start_and_wait, self.where)
                    if why:
                        raise OSError(why) from None
            return await asyncio.open_unix_connection(self.where)


def connect(
    deadline: float,
    on_wait: WaitSink | None = None,
    environ: os._Environ[str] | dict[str, str] = os.environ,
) -> ModelSource:
    """The model source of an invocation: this user's warm gateway for this configuration,
    started and waited for if there is none; the SDK in this process if the gateway is
    turned off, or does not start (then its own error, or one line saying so). Each call
    is retried for up to ``deadline`` seconds; ``on_wait`` hears what calls wait on."""
    if not enabled(environ):
        return in_process(deadline, on_wait)
    where = address(environ)
    if _answers(where):
        return WarmSource(where, deadline, on_wait)
    why = _start_and_wait(where, environ)
    if not why:
        return WarmSource(where, deadline, on_wait)
    source = in_process(deadline, on_wait)  # a bad configuration is its error to report
    _say(f"the warm gateway did not start ({why}); importing the SDK here")
    return source


def in_process(deadline: float, on_wait: WaitSink | None) -> RetryingSource:
    """The SDK in this process, behind a limiter of this invocation's own."""
    from isoagent.parent.model.retry import RetryingSource
    from isoagent.parent.model.sdk import AnthropicSource

    return RetryingSource(AnthropicSource(), deadline=deadline, on_wait=on_wait)


def _start_and_wait(where: str, environ: os._Environ[str] | dict[str, str] = os.environ) -> str:
    """Start the daemon that holds the gateway at ``where`` and wait until the gateway
    listens (the daemon imports the SDK first), ours or that of the daemon that won the
    address: "" once it does, else why not."""
    try:
        daemon = start_daemon(daemon_address.daemon_address(environ), environ)
    except OSError as exc:
        return str(exc)
    deadline = time.monotonic() + START_SECONDS
    while not _answers(where):
        # exit 0 before it listens: another invocation's daemon holds the address, and
        # loads; that one is waited for
        why = exited(daemon)
        if why and not _answers(where):
            return why
        if time.monotonic() > deadline:
            return f"it did not listen within {START_SECONDS:g} s"
        time.sleep(0.02)
    exited(daemon)
    return ""


def _answers(where: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(where)
        except OSError:
            return False
    return True


def _say(message: str) -> None:
    print(f"isoagent: {message}", file=sys.stderr, flush=True)


def ask(where: str, request: StatusAsked | StopAsked, seconds: float = 5.0) -> GatewayStatus:
    """The status of the gateway at ``where`` (which ``request`` may also stop). OSError if
    it cannot be reached, is another user's, or does not answer (an older version)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(seconds)
        sock.connect(where)
        if not _same_user(sock):
            raise OSError("its address is held by another user's process")
        return exchange(sock, request)


def exchange(sock: socket.socket, request: StatusAsked | StopAsked) -> GatewayStatus:
    """Send ``request`` on the connected ``sock``, and read the status it answers."""
    sock.sendall(encode_frame(request))
    with sock.makefile("rb") as stream:
        header = stream.read(HEADER.size)
        if len(header) < HEADER.size:
            raise OSError("it did not answer (another version of isoagent?)")
        try:
            body = stream.read(check_length(header))
            return _status.decode(body)
        except (FrameError, msgspec.DecodeError) as exc:  # a refusal, another version
            raise OSError(f"its answer is not a status: {exc}") from None


def status(served: int, running: int, quiet: float) -> GatewayStatus:
    """This process's status (a gateway's, or its daemon's), with these calls."""
    key = os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN") or ""
    return GatewayStatus(
        os.getpid(), os.environ.get("ANTHROPIC_BASE_URL", ""), served, running, 0.0,
        quiet_seconds=quiet, python=sys.prefix,
        key=hashlib.sha256(key.encode()).hexdigest()[:8] if key else "",
    )  # fmt: skip


def read_request(sock: socket.socket) -> StatusAsked | StopAsked | WarmCall:
    """One request from ``sock``, whose timeout bounds the wait; OSError if it is none."""
    with sock.makefile("rb") as stream:
        header = stream.read(HEADER.size)
        if len(header) < HEADER.size:
            raise OSError("no request")
        try:
            return _requests.decode(stream.read(check_length(header)))  # type: ignore[no-any-return]
        except (FrameError, msgspec.DecodeError) as exc:
            raise OSError(f"undecodable request: {exc}") from None


# --- the gateway process ---------------------------------------------------------------


def serve_forked(listener: socket.socket, control: int) -> None:
    """The gateway, in a process the daemon forked: answer model calls on ``listener``
    until the daemon closes its end of the ``control`` pipe (or dies)."""
    asyncio.run(serve(listener, control))


async def serve(listener: socket.socket, control: int) -> None:
    """Answer model calls on ``listener`` until ``control`` reads EOF or ``StopAsked``
    comes; then those it has, before it returns. Only calls count as activity: a
    connection that sends none (a probe, a stuck client) is not one."""
    from isoagent.parent.model.retry import DEADLINE

    source = in_process(DEADLINE, None)  # one limiter for every invocation
    calls = 0  # being answered now
    served = 0  # answered since it started
    last = time.monotonic()  # when the last call was answered
    stop = asyncio.Event()
    asyncio.get_running_loop().add_reader(control, stop.set)  # EOF: the daemon is gone

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal calls, served, last
        try:
            if not _same_user(writer.get_extra_info("socket")):
                return
            asked = await asyncio.wait_for(_read_frame(reader, _requests), FRAME_SECONDS)
            if isinstance(asked, StatusAsked | StopAsked):
                quiet = 0.0 if calls else time.monotonic() - last
                writer.write(encode_frame(status(served, calls, quiet)))
                await writer.drain()
                if isinstance(asked, StopAsked):
                    stop.set()
                return
            if not isinstance(asked, WarmCall):
                return
            calls += 1
            try:

                def tell(frame: Waiting | StreamedEvent) -> None:
                    writer.write(encode_frame(frame))

                if asked.partial:  # the call's task hears its events: they go back too
                    event_listener.set(lambda data: tell(StreamedEvent(data)))
                work = asyncio.ensure_future(
                    source.complete(asked.call, deadline=asked.deadline, on_wait=tell)
                )
                gone = asyncio.ensure_future(reader.read(1))  # the invocation hung up
                await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
                gone.cancel()
                if not work.done():  # no one to answer: spare the API the retries
                    work.cancel()
                    return
                writer.write(encode_frame(work.result()))
                await writer.drain()
                served += 1
            finally:
                calls -= 1
                last = time.monotonic()
        except (OSError, asyncio.IncompleteReadError, FrameError, TimeoutError):
            pass  # the invocation went away, sent garbage or nothing: nothing to answer
        finally:
            writer.close()

    server = await asyncio.start_unix_server(answer, sock=listener)
    try:
        async with server:
            await stop.wait()
            server.close()  # no new call; those it has are answered
            while calls:
                await asyncio.sleep(0.05)
    finally:
        await source.aclose()
