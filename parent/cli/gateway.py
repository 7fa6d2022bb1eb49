"""``isoagent gateway list|stop``: this user's warm daemons (``parent/daemon/``), each with its
model gateway.

A warm daemon is one process per user and configuration (server, key, interpreter, code)
that keeps the SDK and a session's code loaded between invocations, until nothing has run
for 5 minutes. Each is found by its listening socket (``/proc/net/unix``) and believed only
once it answers as this user's process (``daemon/peers.py``); its age and memory are its
``/proc``'s.
"""

from __future__ import annotations

import os

import click
import msgspec

from isoagent.child.agent.process_tree import STARTTIME, stat_fields
from isoagent.parent.cli.errors import fail
from isoagent.parent.cli.exit_codes import ExitCode
from isoagent.parent.daemon import peers
from isoagent.parent.model import warm
from isoagent.parent.records.terminal_text import terminal_line

STOP_SECONDS = 10.0  # how long `stop` waits for a gateway to answer its calls and exit
_ID = 12  # hex digits of the address's digest that name a gateway


class Gateway(msgspec.Struct, omit_defaults=True):
    """One warm gateway, as ``list --json`` prints it."""

    id: str
    pid: int
    server: str  # the base URL its calls go to; "": the SDK's default
    age_seconds: float
    memory_bytes: int  # resident (RSS)
    key: str = ""  # a digest of its API key or token ("": none)
    python: str = ""  # the interpreter's installation
    calls_served: int = 0
    calls_running: int = 0
    sessions_served: int = 0
    sessions_running: int = 0
    idle_seconds: float = 0.0  # how long it stays with no call or session


@click.group(
    short_help="List this user's warm gateways (server, age, memory, calls), or stop them."
)
def gateway() -> None:
    """This user's warm gateways: one daemon per server, key, interpreter and version of
    isoagent that keeps the SDK and a session's code loaded between invocations, until
    nothing has run for 5 minutes."""


@gateway.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print them as a JSON array.")
def list_gateways(as_json: bool) -> None:
    """List them: id, pid, server, key, interpreter, age, memory (RSS), calls and sessions."""
    daemons = _running()
    try:
        found = [g for g in map(_describe, daemons) if g is not None]
    finally:
        for daemon in daemons:
            daemon.close()
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(found), indent=2).decode())
        return
    if not found:
        click.echo("isoagent: no warm gateway is running", err=True)
        return
    rows = [("ID", "PID", "SERVER", "KEY", "PYTHON", "AGE", "MEMORY", "CALLS", "SESSIONS")]
    rows += [
        (
            g.id,
            str(g.pid),
            terminal_line(g.server or "(the SDK's default)"),
            g.key or "-",
            terminal_line(g.python),
            _age(g.age_seconds),
            f"{g.memory_bytes / 2**20:.0f} MB",
            _count(g.calls_served, g.calls_running),
            _count(g.sessions_served, g.sessions_running),
        )
        for g in found
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@gateway.command()
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option("--all", "every", is_flag=True, help="Stop every one of them.")
def stop(ids: tuple[str, ...], every: bool) -> None:
    """Stop the gateways ID (a unique prefix is enough), or --all: each answers the calls
    it has, lets its sessions end, takes no more and exits. The next invocation starts one
    again."""
    if bool(ids) == every:
        fail("name the gateways to stop (from 'isoagent gateway list'), or --all", ExitCode.USAGE)
    running = {_id(where): where for where in _listening()}
    targets = sorted(running) if every else [_one(running, prefix) for prefix in ids]
    if not targets:
        click.echo("isoagent: no warm gateway is running", err=True)
    for name in dict.fromkeys(targets):
        _stop(name, running[name])


def _listening() -> list[str]:
    try:
        return peers.listening()
    except OSError as exc:
        fail(f"cannot list the warm gateways: {exc.strerror or exc}")


def _running() -> list[peers.Daemon]:
    try:
        return peers.running()
    except OSError as exc:
        fail(f"cannot list the warm gateways: {exc.strerror or exc}")


def _one(running: dict[str, str], prefix: str) -> str:
    matches = [name for name in running if name.startswith(prefix)]
    if len(matches) != 1:
        why = "no warm gateway" if not matches else f"{len(matches)} warm gateways"
        fail(f"{why} matching {terminal_line(repr(prefix))} (see 'isoagent gateway list')",
             ExitCode.USAGE)  # fmt: skip
    return matches[0]


def _stop(name: str, where: str) -> None:
    """Ask the daemon to stop, and wait for the process that answered (its pidfd): a
    process that does not answer as this user's daemon is never signalled."""
    try:
        daemon = peers.ask(where, warm.StopAsked())
    except OSError as exc:
        click.echo(f"isoagent: gateway {name} was not stopped: {terminal_line(str(exc))}",
                   err=True)  # fmt: skip
        return
    try:
        if daemon.wait(STOP_SECONDS):
            click.echo(f"{name}  stopped (pid {daemon.status.pid})")
        else:
            click.echo(f"isoagent: gateway {name} (pid {daemon.status.pid}) exits once its "
                       "sessions and calls end", err=True)  # fmt: skip
    finally:
        daemon.close()


def _describe(daemon: peers.Daemon) -> Gateway | None:
    """The gateway of ``daemon``, or None if it went away meanwhile."""
    status = daemon.status
    try:
        age, memory = _age_and_memory(status.pid)
    except (OSError, IndexError, ValueError):
        return None
    return Gateway(
        daemon.id, status.pid, status.server, age, memory, key=status.key,
        python=status.python, calls_served=status.calls_served,
        calls_running=status.calls_running, sessions_served=status.sessions_served,
        sessions_running=status.sessions_running, idle_seconds=status.idle_seconds,
    )  # fmt: skip


def _count(served: int, running: int) -> str:
    return f"{served} served" + (f", {running} running" if running else "")


def _id(where: str) -> str:
    return where.rsplit("-", 1)[-1][:_ID]


def _age_and_memory(pid: int) -> tuple[float, int]:
    """Seconds since ``pid`` started, and its resident memory in bytes, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime", encoding="ascii") as uptime:
        now = float(uptime.read().split()[0])
    started = int(stat_fields(pid)[STARTTIME]) / ticks
    with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
        resident = int(statm.read().split()[1])
    return round(max(now - started, 0.0), 1), resident * os.sysconf("SC_PAGE_SIZE")


def _age(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"
