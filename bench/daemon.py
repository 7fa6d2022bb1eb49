"""The thin client and the warm daemon (``parent/daemon/``): what one shell invocation costs.

- ``daemon-one-shot``: ``isoagent task`` with the daemon warm: CPU of the calling process
  (``wait4``) and of all processes together (the client, plus what the daemon's processes
  spent meanwhile: the daemon, its sessions, gateway, fork server and children, from
  ``/proc``), against ``python -c pass`` of the same interpreter, the in-process path
  (``ISOAGENT_WARM_GATEWAY=0``) and ``claude -p``, interleaved, against one server.
- ``daemon-shared``: 48 ``isoagent task`` commands, 16 at a time, sharing 4 requests/s.
- ``daemon-xargs``: ``xargs -P 8`` over 200 files, one ``isoagent task`` each.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.cli_start import SCRIPT
from bench.references import PROMPT, claude_cli, claude_environment, one_bash_call, timed
from bench.stats import Line, Stat, reference
from isoagent.parent.daemon import address
from tests.conftest import cli_env
from tests.support.messages_server import MessagesServer, text_reply
from tests.support.rate_limits import RateLimited
from tests.support.warm import end, listener_pid

TICK = os.sysconf("SC_CLK_TCK")
ISOAGENT = [sys.executable, str(SCRIPT)]


def tree_cpu(root: int) -> float:
    """Seconds of CPU that ``root`` and its descendants have used, and those they reaped."""
    total, pending = 0.0, [root]
    while pending:
        pid = pending.pop()
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in stat[11:15]) / TICK
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        pending += [int(child) for child in children]
    return total


def one_shot(runs: int, skipped: list[str]) -> list[Line]:
    claude, why = claude_cli()
    if claude is None:
        skipped.append(why)
    client: dict[str, list[float]] = {"warm": [], "pass": [], "in-process": [], "claude": []}
    daemon_total = 0.0
    with MessagesServer(one_bash_call()) as server, tempfile.TemporaryDirectory() as tmp:
        work, home = Path(tmp) / "work", Path(tmp) / "home"
        work.mkdir()
        home.mkdir()
        env = {
            **cli_env(server, HOME=str(home)),
            "ISOAGENT_WARM_GATEWAY": "1",
            "ISOAGENT_WARM_GATEWAY_IDLE": "600",
        }
        here = {**env, "ISOAGENT_DAEMON": "0"}  # in-process, the gateway warm
        claude_env = claude_environment(server, home)
        task = [*ISOAGENT, "task", PROMPT]
        where = address.daemon_address(env)
        try:
            timed(task, env, work, "done")  # starts the daemon, fills the page cache
            daemon = listener_pid(where)
            for _ in range(runs):
                before = tree_cpu(daemon)
                client["warm"].append(timed(task, env, work, "done").cpu)
                time.sleep(0.2)  # the session's process is reaped
                daemon_total += tree_cpu(daemon) - before
                client["pass"].append(timed([sys.executable, "-c", "pass"], env, work).cpu)
                client["in-process"].append(timed(task, here, work, "done").cpu)
                if claude is not None:
                    argv = [str(claude), "-p", PROMPT, "--allowedTools", "Bash"]
                    client["claude"].append(timed(argv, claude_env, work, "done").cpu)
        finally:
            end(where)
    ms = {k: Stat([v * 1000 for v in values], "ms") for k, values in client.items() if values}
    everything = Stat([statistics.median(client["warm"]) * 1000 + daemon_total / runs * 1000], "ms")
    floor = ms["pass"].median
    lines = [
        Line(
            "daemon",
            "one-shot `isoagent task`, daemon warm: CPU of the calling process",
            ms["warm"],
            f"+{ms['warm'].median - floor:.0f} ms over `python -c pass`",
            "≤ 30 ms",
            ms["warm"].median <= 30,
            notes=[
                f"A task is one bash call running `true`, then the answer; {runs} runs, "
                "interleaved with the references. `python -c pass` here includes the "
                "editable install's import hook (site-packages' .pth), as the client does."
            ],
        ),
        Line(
            "daemon",
            "the same, all processes together (client + daemon, session, gateway, fork "
            "server, child)",
            everything,
            f"{everything.median / ms['in-process'].median:.2f}x the in-process path's "
            "calling process",
            "≤ 80 ms",
            everything.median <= 80,
            notes=[
                "The daemon's side is its process tree's CPU (/proc, clock ticks) over "
                "all runs, per run; the client's is the median of wait4."
            ],
        ),
        reference("daemon", "`python -c pass`, same interpreter", ms["pass"]),
        reference(
            "daemon",
            "`isoagent task` in its own process, gateway warm (`ISOAGENT_DAEMON=0`): CPU",
            ms["in-process"],
        ),
    ]
    if "claude" in ms:
        lines.append(reference("daemon", "`claude -p`: CPU", ms["claude"]))
    return lines


def _commands(env: dict[str, str], work: Path, count: int, at_once: int, stdin: bool) -> float:
    """``count`` ``isoagent task`` commands, ``at_once`` at a time (``xargs -P``): seconds."""
    files = "".join(f"{i}\n" for i in range(count))
    if stdin:
        for i in range(count):
            (work / f"f{i}.py").write_text(f"print({i})\n")
        script = " ".join(ISOAGENT) + ' task "review f$0.py" < f$0.py > out-$0.txt 2>/dev/null'
    else:
        script = " ".join(ISOAGENT) + ' task "rate task $0" > out-$0.txt 2>/dev/null'
    started = time.perf_counter()
    subprocess.run(
        ["xargs", "-P", str(at_once), "-I{}", "sh", "-c", script, "{}"],
        input=files,
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - started
    ok = sum((work / f"out-{i}.txt").read_text() == "done\n" for i in range(count))
    if ok != count:
        raise RuntimeError(f"{count - ok} of {count} commands did not answer 'done'")
    return wall


def shared(count: int = 48, at_once: int = 16) -> list[Line]:
    """48 commands, 16 at a time, sharing 4 requests/s through the daemon's one gateway."""
    limited = RateLimited(lambda _r: text_reply("done"), requests_per_second=4)
    ideal = (count - 4) / 4 + 0.0  # a bucket of 4, then 4 a second
    with MessagesServer(limited) as server, tempfile.TemporaryDirectory() as tmp:
        env = {
            **cli_env(server, HOME=tmp),
            "ISOAGENT_WARM_GATEWAY": "1",
            "ISOAGENT_WARM_GATEWAY_IDLE": "600",
        }
        where = address.daemon_address(env)
        try:
            timed([*ISOAGENT, "task", "warm up"], env, Path(tmp), "done")  # the daemon starts
            time.sleep(2)  # the bucket fills again
            wall = _commands(env, Path(tmp), count, at_once, stdin=False)
        finally:
            end(where)
    return [
        Line(
            "daemon",
            f"{count} `isoagent task` commands, {at_once} at a time, sharing 4 requests/s",
            Stat([wall], "s"),
            f"{wall / ideal:.2f}x the limit's ideal ({ideal:g} s)",
            "≤ 1.2x ideal",
            wall <= 1.2 * ideal,
            notes=[
                f"the server refused {limited.refused} requests (429); the daemon was started "
                "(by one command) before the timed run."
            ],
        )
    ]


def xargs(count: int = 200, at_once: int = 8) -> list[Line]:
    """``xargs -P 8`` over 200 files, each piped to its own ``isoagent task``."""
    walls = {}
    with MessagesServer(lambda _r: text_reply("done")) as server:
        for name, on in (("daemon", "1"), ("in-process", "0")):
            with tempfile.TemporaryDirectory() as tmp:
                env = {
                    **cli_env(server, HOME=tmp),
                    "ISOAGENT_WARM_GATEWAY": "1",
                    "ISOAGENT_DAEMON": on,
                    "ISOAGENT_WARM_GATEWAY_IDLE": "600",
                }
                where = address.daemon_address(env)
                try:
                    walls[name] = _commands(env, Path(tmp), count, at_once, stdin=True)
                finally:
                    end(where)
    return [
        Line(
            "daemon",
            f"`xargs -P {at_once}` over {count} files, `isoagent task ... < FILE` each",
            Stat([walls["daemon"]], "s"),
            f"{walls['in-process'] / walls['daemon']:.1f}x faster than in-process",
            notes=["Zero-latency server; the daemon starts in the run."],
        ),
        reference(
            "daemon",
            "the same, each in its own process (`ISOAGENT_DAEMON=0`)",
            Stat([walls["in-process"]], "s"),
        ),
    ]
