"""The warm gateway: one process per user that keeps the SDK imported between invocations.

``import anthropic`` is most of what a one-shot ``isoagent task`` costs (about a second of
CPU). For a shell loop (``for f in *.py; do isoagent task ... < /dev/null; done``) the first
invocation starts ``python -m isoagent.parent.model.warm``, detached; it imports the SDK and
answers ``ModelCall`` frames with ``ModelReply`` frames, one call per connection, until it
has been idle for ``IDLE_SECONDS``. Later invocations send their model calls there and never
import the SDK.

- Per user and per configuration: the address holds the uid and a hash of every
  ``ANTHROPIC_*`` variable, the proxy and certificate variables and the interpreter, so a
  changed key, server or proxy gets a gateway of its own, and the key stays in the
  environment of the process that was given it.
- An abstract unix socket, answered only for peers of the same uid (``SO_PEERCRED``), and
  unreachable from sandboxed children (Landlock scopes abstract sockets, and a child with
  the network off has a network namespace of its own).
- ``ISOAGENT_WARM_GATEWAY=0`` turns it off: every invocation imports the SDK itself.
  A gateway that cannot be reached or started is reported once; the SDK is used in-process.
- ``isoagent gateway list|stop`` finds this user's in ``/proc/net/unix`` and asks each for
  its ``GatewayStatus``; a stopped one answers the calls it has, and takes no more.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import struct
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import msgspec

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

VARIABLE = "ISOAGENT_WARM_GATEWAY"
IDLE_VARIABLE = "ISOAGENT_WARM_GATEWAY_IDLE"  # seconds; tests make it short
IDLE_SECONDS = 300.0
START_SECONDS = 30.0  # how long a starting gateway may take to import the SDK and listen
FRAME_SECONDS = 10.0  # how long a connection may take to send its call: probes send none
# of the frames below (3: ModelCall.options; 4: streamed events): another version, another address
WIRE_VERSION = 4


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
    pid: int
    server: str  # its ANTHROPIC_BASE_URL; "": the SDK's default
    calls_served: int
    calls_running: int
    idle_seconds: float  # how long it stays with no call


# the gateway answers a WarmCall with a Waiting for each change of what the call waits on
# (the invocation says it on its stderr: the gateway has none), the streamed events if they
# were asked for, then the ModelReply
_requests = msgspec.msgpack.Decoder(WarmCall | StatusAsked | StopAsked)
_status = msgspec.msgpack.Decoder(GatewayStatus)
PREFIX = "isoagent-gateway-"  # of every gateway's address, then the uid and the digest
_answers_decoder = msgspec.msgpack.Decoder(ModelReply | Waiting | StreamedEvent)


def enabled(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    return environ.get(VARIABLE, "1") != "0"


# what else the SDK's HTTP client reads from the environment: proxies and certificates
_HTTP_VARIABLES = frozenset(
    {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR"}
)


def address(environ: os._Environ[str] | dict[str, str] = os.environ) -> str:
    """The abstract socket name of this user's gateway for this configuration: the
    interpreter and every variable the SDK reads (``ANTHROPIC_*``, proxies, certificates)."""
    config = [
        f"wire {WIRE_VERSION}",
        sys.executable,
        *sorted(f"{k}={v}" for k, v in _configuration(environ).items()),
    ]
    digest = hashlib.sha256("\0".join(config).encode()).hexdigest()[:32]
    return f"\0{PREFIX}{os.getuid()}-{digest}"


def _configuration(environ: os._Environ[str] | dict[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in environ.items()
        if k.startswith("ANTHROPIC_") or k.upper() in _HTTP_VARIABLES
    }


def _own_settings(environ: os._Environ[str] | dict[str, str]) -> dict[str, str]:
    """Its idle time, where its code is, and HOME (the SDK's ``~/.config/anthropic``)."""
    return {k: environ[k] for k in (IDLE_VARIABLE, "PYTHONPATH", "HOME") if k in environ}


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
                    why = await asyncio.to_thread(_wait_listening, self.where, _start())
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
    try:
        why = _wait_listening(where, _start())
    except OSError as exc:
        why = str(exc)
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


def _wait_listening(where: str, process: subprocess.Popen[bytes]) -> str:
    """Wait until a starting gateway listens (it imports the SDK first), ours or the one
    that won the address: "" once it does, else why not."""
    deadline = time.monotonic() + START_SECONDS
    while not _answers(where):
        # code 0 before it listens: another invocation's gateway holds the address, and
        # is importing the SDK; that one is waited for
        if process.poll() and not _answers(where):
            return f"it exited with code {process.returncode}"
        if time.monotonic() > deadline:
            return f"it did not listen within {START_SECONDS:g} s"
        time.sleep(0.02)
    return ""


def _start() -> subprocess.Popen[bytes]:
    """``python -m isoagent.parent.model.warm``, detached from this invocation, with only
    the variables its address is made of: whichever invocation starts it, a later one that
    shares it sees the same gateway."""
    return subprocess.Popen(
        [sys.executable, "-m", "isoagent.parent.model.warm"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",  # holds no directory of the invocation's
        env=_configuration(os.environ) | _own_settings(os.environ),
        start_new_session=True,  # not ended with the invocation's process group
    )


def _answers(where: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(where)
        except OSError:
            return False
    return True


def _say(message: str) -> None:
    print(f"isoagent: {message}", file=sys.stderr, flush=True)


_ACCEPTING = 0x10000  # /proc/net/unix's flag of a listening socket (__SO_ACCEPTCON)


def listening() -> list[str]:
    """The addresses of this user's warm gateways that listen in this network namespace,
    read from ``/proc/net/unix``."""
    prefix = f"@{PREFIX}{os.getuid()}-"
    found: set[str] = set()
    with open("/proc/net/unix", encoding="utf-8", errors="replace") as table:
        next(table, None)  # Num RefCount Protocol Flags Type St Inode Path
        for line in table:
            fields = line.split()
            if (
                len(fields) == 8
                and int(fields[3], 16) & _ACCEPTING
                and fields[7].startswith(prefix)
            ):
                found.add("\0" + fields[7][1:])
    return sorted(found)


def listener_pid(where: str) -> int:
    """The pid of the process listening on abstract socket ``where``, or 0."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(where)
        except OSError:
            return 0
        return _peer(probe)[0]


def ask(where: str, request: StatusAsked | StopAsked, seconds: float = 5.0) -> GatewayStatus:
    """The status of the gateway at ``where`` (which ``request`` may also stop). OSError if
    it cannot be reached, is another user's, or does not answer (an older version)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(seconds)
        sock.connect(where)
        if not _same_user(sock):
            raise OSError("its address is held by another user's process")
        sock.sendall(encode_frame(request))
        with sock.makefile("rb") as stream:
            header = stream.read(HEADER.size)
            if len(header) < HEADER.size:
                raise OSError("it did not answer (another version of isoagent?)")
            body = stream.read(check_length(header))
    try:
        return _status.decode(body)
    except msgspec.DecodeError as exc:
        raise OSError(f"its answer did not decode: {exc}") from None


# --- the gateway process ---------------------------------------------------------------


async def serve(where: str, idle: float = IDLE_SECONDS) -> None:
    """Answer model calls on ``where`` until none has come for ``idle`` seconds. Only calls
    count: a connection that sends none (a probe, a stuck client) keeps nothing alive."""
    from isoagent.child.sandbox.privileges import make_undumpable
    from isoagent.parent.model.retry import DEADLINE

    make_undumpable()  # this process holds the key: its environ and memory, not for children
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # a second gateway started at the same time stops here, before it imports the SDK:
        # sixteen invocations starting at once would otherwise import it sixteen times
        listener.bind(where)
    except OSError:
        listener.close()
        return
    source = in_process(DEADLINE, None)  # one limiter for every invocation
    calls = 0  # being answered now
    served = 0  # answered since it started
    last = time.monotonic()  # when the last call was answered
    stop = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal calls, served, last
        try:
            if not _same_user(writer.get_extra_info("socket")):
                return
            asked = await asyncio.wait_for(_read_frame(reader, _requests), FRAME_SECONDS)
            if isinstance(asked, StatusAsked | StopAsked):
                server = os.environ.get("ANTHROPIC_BASE_URL", "")
                writer.write(encode_frame(GatewayStatus(os.getpid(), server, served, calls, idle)))
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
            while not stop.is_set() and (calls or time.monotonic() - last < idle):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), min(idle, 1.0))
            server.close()  # stopped or idle: no new call; those it has are answered
            while calls:
                await asyncio.sleep(0.05)
    finally:
        await source.aclose()


def main() -> None:
    idle = float(os.environ.get(IDLE_VARIABLE) or IDLE_SECONDS)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(address(), idle))


if __name__ == "__main__":
    main()
