"""``isoagent gateway list|stop``: this user's warm gateways (``model/warm.py``).

A warm gateway is one process per server and key that keeps the SDK imported between
invocations, until no call has come for 5 minutes. Each is found by its listening socket
(``/proc/net/unix``) and asked for its status; its age and memory are its ``/proc``'s.
"""

from __future__ import annotations

import os
import signal
import time

import click
import msgspec

from isoagent.child.agent.process_tree import DEAD, STARTTIME, STATE, stat_fields
from isoagent.parent.cli.errors import fail
from isoagent.parent.cli.exit_codes import ExitCode
from isoagent.parent.model import warm

STOP_SECONDS = 10.0  # how long `stop` waits for a gateway to answer its calls and exit
_ID = 12  # hex digits of the address's digest that name a gateway


class Gateway(msgspec.Struct, omit_defaults=True):
    """One warm gateway, as ``list --json`` prints it."""

    id: str
    pid: int
    server: str  # the base URL its calls go to; "": the SDK's default
    age_seconds: float
    memory_bytes: int  # resident (RSS)
    calls_served: int = 0
    calls_running: int = 0
    idle_seconds: float = 0.0  # how long it stays with no call
    error: str = ""  # why it gave no status (another version of isoagent)


@click.group(
    short_help="List this user's warm gateways (server, age, memory, calls), or stop them."
)
def gateway() -> None:
    """This user's warm gateways: one process per server and key that keeps the SDK
    imported between invocations, until no call has come for 5 minutes."""


@gateway.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print them as a JSON array.")
def list_gateways(as_json: bool) -> None:
    """List them: id, pid, server, age, memory (RSS) and calls served."""
    found = [g for g in map(_describe, _listening()) if g is not None]
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(found), indent=2).decode())
        return
    if not found:
        click.echo("isoagent: no warm gateway is running", err=True)
        return
    rows = [("ID", "PID", "SERVER", "AGE", "MEMORY", "CALLS")]
    rows += [
        (
            g.id,
            str(g.pid),
            "?" if g.error else g.server or "(the SDK's default)",
            _age(g.age_seconds),
            f"{g.memory_bytes / 2**20:.0f} MB",
            "? (no status: another version)" if g.error else _calls(g),
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
    it has, takes no more and exits. The next invocation starts one again."""
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
        return warm.listening()
    except OSError as exc:
        fail(f"cannot list the warm gateways: {exc.strerror or exc}")


def _one(running: dict[str, str], prefix: str) -> str:
    matches = [name for name in running if name.startswith(prefix)]
    if len(matches) != 1:
        why = "no warm gateway" if not matches else f"{len(matches)} warm gateways"
        fail(f"{why} matching {prefix!r} (see 'isoagent gateway list')", ExitCode.USAGE)
    return matches[0]


def _stop(name: str, where: str) -> None:
    try:
        pid = warm.ask(where, warm.StopAsked()).pid
        how = "stopped"
    except OSError as exc:  # an older gateway: it knows no StopAsked, it ends on SIGTERM
        pid = warm.listener_pid(where)
        if not pid:
            fail(f"cannot stop gateway {name}: {exc}")
        os.kill(pid, signal.SIGTERM)
        how = f"ended with SIGTERM ({exc})"
    deadline = time.monotonic() + STOP_SECONDS
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        click.echo(
            f"isoagent: gateway {name} (pid {pid}) exits once its calls are answered", err=True
        )
    else:
        click.echo(f"{name}  {how} (pid {pid})")


def _describe(where: str) -> Gateway | None:
    """The gateway at ``where``, or None if it went away meanwhile."""
    error = ""
    try:
        status = warm.ask(where, warm.StatusAsked())
        pid = status.pid
    except OSError as exc:
        status = None
        pid = warm.listener_pid(where)
        error = f"no status: {exc}"
    try:
        age, memory = _age_and_memory(pid)
    except (OSError, IndexError, ValueError):
        return None
    gateway = Gateway(_id(where), pid, "", age, memory, error=error)
    if status is not None:
        gateway.server = status.server
        gateway.calls_served = status.calls_served
        gateway.calls_running = status.calls_running
        gateway.idle_seconds = status.idle_seconds
    return gateway


def _calls(gateway: Gateway) -> str:
    running = f", {gateway.calls_running} running" if gateway.calls_running else ""
    return f"{gateway.calls_served} served{running}"


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


def _alive(pid: int) -> bool:
    try:
        return stat_fields(pid)[STATE] not in DEAD
    except OSError:
        return False


def _age(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"
