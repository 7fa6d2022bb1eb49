"""``python -m isoagent.parent.daemon ADDRESS``: this user's warm daemon for one configuration.

One process per user, configuration, build of the code and process context (``address.py``)
that has imported everything a session needs, and holds:
- the model gateway (``model/warm.py``), a process forked from it at start, which imports
  the SDK: every invocation's model calls, the Python API's too, share its one SDK client and
  rate limiter;
- a fork server (``child/forkserver.py``) that every session's children are forked from;
- a session process per invocation, forked when a thin client connects (``session.py``):
  the command runs there on the client's descriptors, environment and working directory, as
  it would have in the client's own process. A fork per invocation, not a task per
  invocation in this process: everything process-wide (``os.environ``, the working directory,
  signal handlers, ``sys.stdout``, limits, module state) is the invocation's alone, and a
  session that crashes takes no other down.

It serves peers of its own user whose process context is its own (``SO_PEERCRED`` and
``/proc/PID``, through a pidfd); it answers ``isoagent gateway list|stop`` with its status;
it leaves once no session has run and no model call has been made for
``ISOAGENT_WARM_GATEWAY_IDLE`` seconds (5 minutes by default). Starting, it stops the
daemons of this user beyond ``MAX_LIVE``, the longest idle first.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from isoagent.parent.daemon import address, session, wire
from isoagent.parent.daemon.client import IDLE_VARIABLE, MOST_VARIABLE

if TYPE_CHECKING:
    from isoagent.parent.model import warm

IDLE_SECONDS = 300.0
MAX_LIVE = 8  # this user's daemons at once (ISOAGENT_WARM_DAEMONS): one more stops the longest idle
PEEK_SECONDS = 2.0  # how long a peer may take to say what it wants
ASK_SECONDS = 0.5  # how long the daemon waits for its gateway's status (none while it loads)
# what a session imports: loaded once here, shared by every session's process. Not the SDK:
# sessions make their calls through the gateway, which imports it in its own process; the
# daemon stays small (30 MB, not 90), and a fork of it costs a third
PRELOAD = (
    "isoagent.parent.cli.main", "isoagent.parent.cli.task", "isoagent.parent.cli.run",
    "isoagent.parent.cli.trust",
    "isoagent.parent.cli.batch", "isoagent.parent.cli.print_mode", "isoagent.parent.session",
    "isoagent.parent.batch.runner", "isoagent.parent.model.sdk", "isoagent.parent.model.retry",
    "isoagent.parent.model.stream", "isoagent.parent.model.cassette",
)  # fmt: skip
_SO_PEERPIDFD = 77  # Linux 6.5: a pidfd of the peer, as it was when it connected


class Daemon:
    def __init__(self, where: str, idle: float) -> None:
        self.where = where
        self.idle = idle
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.gateway_listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.context = address.context()
        self.sessions: dict[int, socket.socket] = {}  # each session's pid: its client
        self.served = 0
        self.last = time.monotonic()  # when the last session ended
        self.gateway = 0  # its pid
        self.gateway_control = -1  # closed: the gateway takes no more calls
        self.gateway_ready = False  # it has answered: its SDK is imported, its loop runs
        self.fork_server: subprocess.Popen[bytes] | None = None
        self.fork_server_socket: socket.socket | None = None
        self.stopping = False
        self.stop_asked = False  # SIGTERM: stop at the next turn of the loop

    def bind(self) -> int | None:
        """Both addresses: None once bound; else the exit status, 0 when another daemon
        holds them (it serves), 4 when another process holds the gateway's."""
        try:
            self.listener.bind(self.where)
        except OSError:
            return 0
        try:
            self.gateway_listener.bind(address.gateway_address(self.where))
        except OSError:
            return 4
        return None

    def start(self) -> None:
        """Load, start the gateway and the fork server, and listen."""
        from isoagent.parent.model import warm

        read, self.gateway_control = os.pipe()
        self.gateway_listener.listen(64)  # calls wait in its backlog while the gateway starts
        self.gateway = os.fork()
        if self.gateway == 0:  # the gateway: until the daemon closes its end of the pipe
            code = 0
            try:
                os.close(self.gateway_control)
                self.listener.close()
                warm.serve_forked(self.gateway_listener, read)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(read)
        self.gateway_listener.close()
        for module in PRELOAD:  # while the gateway imports the SDK
            importlib.import_module(module)
        _fill_caches()
        from isoagent.parent.session import raise_open_files_limit  # preloaded

        raise_open_files_limit()  # as the CLI does before its fork server starts: the
        # children inherit its soft limit (a soft limit is no part of a process's context)
        self._start_fork_server()
        gc.collect()
        gc.freeze()  # what every session shares stays shared: no collection touches it
        self.listener.listen(64)

    def _start_fork_server(self) -> None:
        from isoagent.child.identity import allowed_environment
        from isoagent.parent.children.launch import FORK_SERVER_COMMAND, PACKAGE_ROOT

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.fork_server = subprocess.Popen(
                [*FORK_SERVER_COMMAND, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                cwd=PACKAGE_ROOT,
                env=allowed_environment(os.environ),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.fork_server_socket = ours
        except OSError:  # sessions start their children the plain way
            ours.close()
        finally:
            theirs.close()

    def serve(self) -> None:
        from isoagent.child.forkserver import wake_on_child_exit

        wake = wake_on_child_exit()
        while self.sessions or not self.stopping:
            timeout = None if self.stopping else max(self.idle - self._quiet(), 0.05)
            waits: list[int | socket.socket] = [wake] if self.stopping else [self.listener, wake]
            ready, _, _ = select.select(waits, [], [], timeout)
            if self.stop_asked:
                self.stop()
            if wake in ready:
                self._reap(wake)
            if self.listener in ready and not self.stopping:
                self._accept()
            if not ready and not self.sessions and self._gateway_quiet() >= self.idle:
                self.stop()
        self._close()

    def _quiet(self) -> float:
        return 0.0 if self.sessions else time.monotonic() - self.last

    def _gateway_quiet(self) -> float:
        """How long the gateway has had no call (0 while it answers one, or loads)."""
        gateway = self._gateway_status()
        if gateway is None:  # still importing the SDK (it answers nothing then), or gone
            return 0.0 if self.gateway else self.idle
        return self._quiet_with(gateway)

    def _quiet_with(self, gateway: warm.GatewayStatus | None) -> float:
        """Quiet since this daemon's last session or its gateway's last call; a gateway
        that has answered none counts from the daemon's start, not its own (which comes
        later, by however long its import took: the longest idle is the oldest unused)."""
        if gateway is None or not gateway.calls_served:
            return self._quiet()
        return 0.0 if gateway.calls_running else min(gateway.quiet_seconds, self._quiet())

    def _gateway_status(self) -> warm.GatewayStatus | None:
        """Its gateway's status, asked briefly: this loop serves every invocation."""
        from isoagent.parent.model import warm

        try:
            status = warm.ask(address.gateway_address(self.where), warm.StatusAsked(), ASK_SECONDS)
        except OSError:
            return None
        self.gateway_ready = True
        return status

    def stop(self) -> None:
        """Take no more invocations (a new daemon may take the address); the sessions
        running go on to their end, then the daemon leaves."""
        if not self.stopping:
            self.stopping = True
            self.listener.close()

    def _close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.gateway_control)  # the gateway answers what it has, and leaves
        if self.fork_server_socket is not None:
            self.fork_server_socket.close()  # the fork server leaves
        if self.fork_server is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.fork_server.wait(5)
        if self.gateway and not self.gateway_ready and self._gateway_status() is None:
            # still importing the SDK: it has taken no call yet, and would hold its address
            # until its import ends (seconds, on a loaded machine)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.gateway, signal.SIGKILL)
        if self.gateway:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.gateway, 0)

    def _reap(self, wake: int) -> None:
        from isoagent.child.forkserver import reaped

        for pid, code in reaped(wake):  # code: negative when killed by that signal
            if pid == self.gateway or (self.fork_server and pid == self.fork_server.pid):
                self.stop()  # a daemon without them serves no one well: the next one will
                if pid == self.gateway:
                    self.gateway = 0
                continue
            client = self.sessions.pop(pid, None)
            if client is None:
                continue
            self.last = time.monotonic()
            kind = wire.KILLED if code < 0 else wire.EXITED
            with contextlib.suppress(OSError):  # its client may have gone
                client.send(wire.frame(kind, wire.CODE.pack(abs(code))), socket.MSG_DONTWAIT)
            client.close()

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        try:
            client.settimeout(PEEK_SECONDS)
            first = client.recv(len(wire.MAGIC), socket.MSG_PEEK)
            invocation = first.startswith(wire.MAGIC[:4])
            # an invocation only from a peer that may do all the daemon does; a status or a
            # stop from any process of its user (another namespace's `gateway list` too)
            why = self._refusal(client) if invocation else self._other_user(client)
            if why:
                client.sendall(wire.frame(wire.REFUSED, why.encode()))
            elif invocation:
                self._fork_session(client)
                return
            else:
                self._answer_status(client)
        except OSError:
            pass
        client.close()

    @staticmethod
    def _other_user(client: socket.socket) -> str:
        credentials = client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        return (
            "another user's process" if struct.unpack("3i", credentials)[1] != os.geteuid() else ""
        )

    def _refusal(self, client: socket.socket) -> str:
        """Why the peer is not served ("" when it is): another user, or a process that
        may do or see less than this one (confined, another namespace or cgroup)."""
        credentials = client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        pid, uid, _gid = struct.unpack("3i", credentials)
        if uid != os.geteuid():
            return "another user's process"
        try:
            pidfd = client.getsockopt(socket.SOL_SOCKET, _SO_PEERPIDFD)
        except OSError:  # an older kernel: the pid it had then is the one it has now
            pidfd = os.pidfd_open(pid)
        try:
            theirs = address.context(pid)
            if select.select([pidfd], [], [], 0)[0]:  # it ended: that pid may be another's
                return "it ended"
        except OSError:
            return "its process context cannot be read"
        finally:
            os.close(pidfd)
        if theirs != self.context:
            return "its process context is not the daemon's"
        return ""

    def _fork_session(self, client: socket.socket) -> None:
        from isoagent.parent.children.sandbox_policy import walk_system_secrets  # preloaded

        walk_system_secrets()  # the session inherits it: one walk serves sessions for seconds
        client.settimeout(None)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            mine = [self.listener, *self.sessions.values()]
            if self.fork_server_socket is not None:
                mine.append(self.fork_server_socket)
            session.become(client, self._attach(), self.fork_server, mine)  # never returns
        self.sessions[pid] = client
        self.served += 1

    def _attach(self) -> socket.socket | None:
        """In a session's process: a socket of its own to the fork server."""
        if self.fork_server_socket is None:
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        from isoagent.protocol.forkserver import Attach, encode

        try:
            socket.send_fds(self.fork_server_socket, [encode(Attach())], [theirs.fileno()])
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        return ours

    def _answer_status(self, client: socket.socket) -> None:
        """``isoagent gateway list|stop``: this daemon's status, with its gateway's calls."""
        from isoagent.parent.model import warm

        asked = warm.read_request(client)
        gateway = self._gateway_status()
        calls = (gateway.calls_served, gateway.calls_running) if gateway else (0, 0)
        status = warm.status(*calls, self._quiet_with(gateway))
        status.idle_seconds = self.idle
        status.sessions_running = len(self.sessions)
        status.sessions_served = self.served
        client.sendall(warm.encode_frame(status))
        if isinstance(asked, warm.StopAsked):
            self.stop()


def _fill_caches() -> None:
    """Compute once, here, what every session would compute alike on its first use: the
    tools' input schemas, the options' resolved types, what sandbox this machine gives
    (its probe is a process of its own: 20 ms of CPU a session otherwise)."""
    from isoagent.child.agent.tools import TOOL_CLASSES
    from isoagent.child.agent.tools.base import input_schema
    from isoagent.parent import options
    from isoagent.parent.children import sandbox_policy

    for tool in TOOL_CLASSES.values():
        input_schema(tool.Input)
    for kind in (options.Options, options.AgentDefinition):
        options._field_types(kind)
    sandbox_policy.landlock_available()
    sandbox_policy.pid_namespaces_available()


def main() -> None:
    from isoagent.child.sandbox.privileges import make_undumpable
    from isoagent.parent.daemon.peers import make_room

    os.chdir("/")  # holds no folder of any invocation's
    where = address.daemon_address(os.environ)
    if len(sys.argv) > 1 and "\0" + sys.argv[1] != where:
        sys.exit(3)  # the code changed since the client looked, or exec changed the context
    make_undumpable()  # it holds the key: its environ and memory, not for children
    idle = float(os.environ.get(IDLE_VARIABLE) or IDLE_SECONDS)
    daemon = Daemon(where, idle)
    if (refused := daemon.bind()) is not None:
        sys.exit(refused)
    make_room(where, int(os.environ.get(MOST_VARIABLE) or MAX_LIVE))
    daemon.start()
    signal.signal(signal.SIGTERM, lambda *_: setattr(daemon, "stop_asked", True))
    daemon.serve()
