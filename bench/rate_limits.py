"""Batches against a server that rate-limits and overloads as the API does.

``python -m bench --only rate-limit`` runs the row: the tight case (``batch-1rps``: 40
one-turn tasks at -j 40 against 1 request/s, a bucket of one request, a 1 s retry-after),
the same against a proxy that sends no rate-limit headers (``batch-1rps-bare``), the
moderate one (``batch-20rps``: 200 tasks at 20 requests/s) and the shared one
(``tasks-4rps``: 48 ``isoagent task`` commands, 16 at a time, sharing 4 requests/s through
the warm gateway), each against its ideal wall time and with at most j + 5% of the tasks
refused. ``python -m bench.rate_limits CASE`` runs one of ``CASES`` once (also
``overload``; ``tasks-4rps-apart`` with the warm gateway off, ``tasks-unlimited`` the
start-up floor) and prints what it measured: tasks ok, wall time against the limit's ideal,
429s and 529s answered.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.cli_start import SCRIPT
from bench.stats import Line, Stat
from tests.conftest import cli_env
from tests.support.messages_server import Handler, MessagesServer, text_reply
from tests.support.rate_limits import Overloaded, RateLimited

ISOAGENT = [sys.executable, str(SCRIPT)]


@dataclass
class Outcome:
    tasks: int
    ok: int
    wall: float
    refused: int  # 429s
    overloaded: int  # 529s
    retries: int  # as the tasks' result lines count them
    stderr: str


def _answer(latency: float) -> Handler:
    return lambda request: text_reply("done", delay=latency)


def _batch(server: MessagesServer, tasks: int, jobs: int, env: dict[str, str]) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="isoagent-bench-") as tmp:
        work = Path(tmp)
        lines = [{"id": f"t{i}", "prompt": f"rate task {i}"} for i in range(tasks)]
        (work / "tasks.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        argv = [*ISOAGENT, "batch", "tasks.jsonl", "-j", str(jobs), "-o", "out.jsonl"]
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        out = work / "out.jsonl"
        records = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    return Outcome(
        tasks,
        sum(r["status"] == "ok" for r in records),
        wall,
        0,
        0,
        sum(r.get("retries", 0) for r in records),
        done.stderr,
    )


def _tasks(server: MessagesServer, tasks: int, at_once: int, env: dict[str, str]) -> Outcome:
    """``isoagent task`` commands, ``at_once`` at a time, as ``xargs -P`` runs them."""
    with tempfile.TemporaryDirectory(prefix="isoagent-bench-") as tmp:
        script = " ".join(ISOAGENT) + ' task "rate task $0" > out-$0.txt 2> err-$0.txt'
        prompts = "".join(f"{i}\n" for i in range(tasks))
        started = time.perf_counter()
        subprocess.run(
            ["xargs", "-P", str(at_once), "-I{}", "sh", "-c", script, "{}"],
            input=prompts,
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - started
        work = Path(tmp)
        ok = sum((work / f"out-{i}.txt").read_text() == "done\n" for i in range(tasks))
        stderr = "".join((work / f"err-{i}.txt").read_text() for i in range(tasks))
    return Outcome(tasks, ok, wall, 0, 0, 0, stderr)


@dataclass
class Case:
    what: str
    tasks: int
    jobs: int
    ideal: float  # seconds, the limit's own
    make: Callable[[], RateLimited | Overloaded]
    commands: bool = False  # separate `isoagent task` commands, not one batch
    warm: bool = False
    target: float = 1.25  # of the ideal, the most the row accepts

    @property
    def most_refused(self) -> float:
        """The refusals the row accepts: one first wave (the tasks at once) and 5% more."""
        return self.jobs + 0.05 * self.tasks


CASES = {
    "batch-20rps": Case(
        "200 tasks, -j 64, 20 requests/s, 200 ms a call",
        200,
        64,
        10.0,
        lambda: RateLimited(_answer(0.2), requests_per_second=20),
    ),
    "batch-20rps-quick": Case(
        "40 tasks, -j 16, 20 requests/s, 200 ms a call",
        40,
        16,
        2.0,
        lambda: RateLimited(_answer(0.2), requests_per_second=20),
    ),
    "batch-1rps": Case(
        "40 tasks, -j 40, 1 request/s (a one-request bucket, 1 s retry-after)",
        40,
        40,
        39.0,
        lambda: RateLimited(_answer(0.0), requests_per_second=1),
    ),
    "batch-1rps-bare": Case(
        "40 tasks, -j 40, 1 request/s, bare 429s (no rate-limit headers, 1 s retry-after)",
        40,
        40,
        39.0,
        lambda: RateLimited(_answer(0.0), requests_per_second=1, headers=False),
    ),
    "overload": Case(
        "100 tasks, -j 32, every request 529 for 30 s, then every 4th, and 5 streams cut",
        100,
        32,
        30.0,
        lambda: Overloaded(_answer(0.0), for_seconds=30, then_every=4, cut=5),
    ),
    "tasks-4rps": Case(
        "48 `isoagent task` commands, 16 at a time, 4 requests/s (warm gateway)",
        48,
        16,
        11.0,
        lambda: RateLimited(_answer(0.0), requests_per_second=4),
        commands=True,
        warm=True,
        target=1.5,
    ),
    "tasks-4rps-apart": Case(
        "48 `isoagent task` commands, 16 at a time, 4 requests/s, ISOAGENT_WARM_GATEWAY=0",
        48,
        16,
        11.0,
        lambda: RateLimited(_answer(0.0), requests_per_second=4),
        commands=True,
    ),
    "tasks-unlimited": Case(
        "48 `isoagent task` commands, 16 at a time, no limit (warm gateway): the floor",
        48,
        16,
        11.0,
        lambda: RateLimited(_answer(0.0)),
        commands=True,
        warm=True,
    ),
}


def run(name: str) -> Outcome:
    case = CASES[name]
    limited = case.make()
    with MessagesServer(limited) as server:
        gateway = {"ISOAGENT_WARM_GATEWAY": "1", "ISOAGENT_WARM_GATEWAY_IDLE": "2"}
        env = cli_env(server, **(gateway if case.warm else {}))
        outcome = (_tasks if case.commands else _batch)(server, case.tasks, case.jobs, env)
    outcome.refused = limited.refused if isinstance(limited, RateLimited) else 0
    outcome.overloaded = limited.overloaded if isinstance(limited, Overloaded) else 0
    if case.warm:
        time.sleep(3)  # the warm gateway ends once idle for 2 s
    return outcome


ROW = ("batch-1rps", "batch-1rps-bare", "batch-20rps", "tasks-4rps")


def row(names: tuple[str, ...] = ROW) -> list[Line]:
    """The bench's row: a line for each case of ``names``."""
    return [_line(name) for name in names]


def _line(name: str) -> Line:
    case = CASES[name]
    outcome = run(name)
    if outcome.ok != outcome.tasks:
        raise RuntimeError(f"rate-limited {name}: {outcome.ok} of {outcome.tasks} ok")
    command = "`isoagent task` commands" if case.commands else "`isoagent batch`"
    return Line(
        "rate limit",
        f"{command}, {case.what}, whole command",
        Stat([outcome.wall], "s"),
        f"{outcome.wall / case.ideal:.2f}x the limit's ideal ({case.ideal:g} s)",
        f"≤ {case.target:g}x ideal, ≤ {case.most_refused:g} refusals",
        outcome.wall <= case.target * case.ideal and outcome.refused <= case.most_refused,
        notes=[
            f"{outcome.ok}/{outcome.tasks} ok; the server refused {outcome.refused} "
            f"requests (429); the tasks' lines count {outcome.retries} retries."
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.rate_limits", description=__doc__)
    parser.add_argument("case", choices=sorted(CASES))
    name = parser.parse_args().case
    case, outcome = CASES[name], run(name)
    waits = [line for line in outcome.stderr.splitlines() if "limited" in line or "API" in line]
    print(
        f"{name}: {case.what}: {outcome.ok}/{outcome.tasks} ok, wall {outcome.wall:.1f} s = "
        f"{outcome.wall / case.ideal:.2f}x ideal {case.ideal:g} s, {outcome.refused} 429s, "
        f"{outcome.overloaded} 529s, {outcome.retries} retries in result lines; "
        f"stderr said: {sorted(set(waits))[:4]}"
    )


if __name__ == "__main__":
    main()
