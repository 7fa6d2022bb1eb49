"""``python -m bench``: measure every row, print one Markdown table, write it as JSON.

Run from the repository root. ``--quick`` uses tiny sizes (the smoke test runs
it); ``--only ROW`` reruns some rows (a noisy one, say).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import (
    api_batches,
    cli_start,
    daemon,
    display_cost,
    flows,
    imports,
    parent_tools,
    rate_limits,
    references,
    remote_start,
    spawn,
    wire,
)
from bench.flows import BatchSize
from bench.stats import Line, markdown
from tests.support.warm import end_serving

ROWS = (
    "child-start",
    "remote-start",
    "memory",
    "delegation",
    "batch",
    "api-batches",
    "rate-limit",
    "task-cpu",
    "one-shot",
    "daemon-one-shot",
    "daemon-shared",
    "daemon-xargs",
    "display",
    "protocol",
    "cli-start",
    "parent-tools",
)
DEFAULT_JSON = Path(__file__).parent / "results.json"


@dataclass
class Sizes:
    start_runs: int
    naive_runs: int
    memory_runs: int
    delegation_rounds: int
    latency: float
    batches: list[BatchSize]
    cpu_tasks: int  # the task CPU row: batches of this many tasks and twice as many
    cpu_jobs: int
    cpu_repeats: int
    idle: int  # other processes running in the task-cpu row's last line (0: no such line)
    one_shot_runs: int
    one_shot_warmup: bool  # a first round, not counted, that fills the page cache
    codec_repeats: int
    codec_seconds: float
    pipe_bytes: int
    pipe_repeats: int
    cli_runs: int
    import_runs: int
    remote_runs: int
    remote_batch_tasks: int
    rate_limit_cases: tuple[str, ...]
    api_batch_tasks: int
    api_batch_delay: float  # seconds a Message Batch takes
    api_batch_window: float
    parent_tool_calls: int  # the parent tools row: calls a session (and twice as many)
    parent_tool_repeats: int


FULL = Sizes(
    start_runs=30,
    naive_runs=10,
    memory_runs=5,
    delegation_rounds=20,
    latency=0.25,
    batches=[
        BatchSize(64, 1, 1),
        BatchSize(64, 4, 1),
        BatchSize(64, 16, 3, target=1.05),
        BatchSize(64, 16, 3, plain=True),
        BatchSize(64, 64, 3, target=1.15),
    ],
    cpu_tasks=128,
    cpu_jobs=64,
    cpu_repeats=5,
    idle=1000,
    one_shot_runs=5,
    one_shot_warmup=True,
    codec_repeats=5,
    codec_seconds=0.3,
    pipe_bytes=50_000_000,
    pipe_repeats=5,
    cli_runs=10,
    import_runs=5,
    remote_runs=15,
    remote_batch_tasks=64,
    rate_limit_cases=rate_limits.ROW,
    api_batch_tasks=500,
    api_batch_delay=5.0,
    api_batch_window=10.0,
    parent_tool_calls=200,
    parent_tool_repeats=5,
)
QUICK = Sizes(  # each row once, as cheaply as it still runs every path
    start_runs=1,
    naive_runs=1,
    memory_runs=1,
    delegation_rounds=1,
    latency=0.02,
    batches=[BatchSize(4, 4, 1, target=1.15), BatchSize(4, 4, 1, plain=True)],
    cpu_tasks=4,
    cpu_jobs=4,
    cpu_repeats=1,
    idle=0,
    one_shot_runs=1,
    one_shot_warmup=False,
    codec_repeats=1,
    codec_seconds=0.02,
    pipe_bytes=1_000_000,
    pipe_repeats=1,
    cli_runs=1,
    import_runs=1,
    remote_runs=1,
    remote_batch_tasks=4,
    rate_limit_cases=("batch-20rps-quick",),
    api_batch_tasks=4,
    api_batch_delay=0.2,
    api_batch_window=1.0,
    parent_tool_calls=2,
    parent_tool_repeats=1,
)


def measure(sizes: Sizes, rows: list[str]) -> tuple[list[Line], list[str]]:
    skipped: list[str] = []
    steps: dict[str, Callable[[], list[Line]]] = {
        "child-start": lambda: spawn.child_start(sizes.start_runs, sizes.naive_runs),
        "delegation": lambda: flows.delegation(sizes.delegation_rounds),
        "batch": lambda: flows.batch(sizes.batches, sizes.latency),
        "api-batches": lambda: api_batches.row(
            sizes.api_batch_tasks, sizes.api_batch_delay, sizes.api_batch_window
        ),
        "rate-limit": lambda: rate_limits.row(sizes.rate_limit_cases),
        "task-cpu": lambda: references.task_cpu(
            sizes.cpu_tasks, sizes.cpu_jobs, sizes.cpu_repeats, sizes.idle
        ),
        "one-shot": lambda: references.one_shot(
            sizes.one_shot_runs, sizes.one_shot_warmup, skipped
        ),
        "daemon-one-shot": lambda: daemon.one_shot(max(sizes.one_shot_runs * 2, 1), skipped),
        "daemon-shared": lambda: daemon.shared(*((48, 16) if sizes is FULL else (8, 4))),
        "daemon-xargs": lambda: daemon.xargs(*((200, 8) if sizes is FULL else (8, 4))),
        "memory": lambda: spawn.memory(sizes.memory_runs),
        "protocol": lambda: (
            wire.codec(30, sizes.codec_repeats, sizes.codec_seconds)
            + wire.pipe(sizes.pipe_bytes, sizes.pipe_repeats)
        ),
        "cli-start": lambda: (
            cli_start.cli_start(sizes.cli_runs, skipped) + display_cost.help_cpu(sizes.cli_runs)
        ),
        "display": lambda: display_cost.task_display(sizes.one_shot_runs),
        "remote-start": lambda: remote_start.remote_start(
            sizes.remote_runs, sizes.remote_batch_tasks, skipped
        ),
        "parent-tools": lambda: parent_tools.row(
            sizes.parent_tool_calls, sizes.parent_tool_repeats
        ),
    }
    lines: list[Line] = []
    for row in rows:
        print(f"bench: {row} ...", file=sys.stderr, flush=True)
        lines += steps[row]()
    return lines, skipped


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument(
        "--json",
        type=Path,
        help=f"where to write JSON (default: {DEFAULT_JSON.name} for a full run; a --quick or "
        "--only run writes none unless asked, so it never replaces the full table)",
    )
    parser.add_argument("--only", action="append", choices=ROWS, help="run only this row")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    rows = [row for row in ROWS if not args.only or row in args.only]
    started = time.monotonic()
    load_before = os.getloadavg()
    try:
        lines, skipped = measure(sizes, rows)
    finally:
        end_serving()  # the rows' commands started warm daemons for the rows' servers
    print("bench: child imports ...", file=sys.stderr, flush=True)
    costs = imports.beyond_floor(sizes.import_runs)
    seconds = time.monotonic() - started
    load_after = os.getloadavg()
    command = "python -m bench" + "".join(f" {a}" for a in sys.argv[1:])
    context = (
        f"`{command}` on {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}; {seconds:.0f} s; load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after."
    )
    print(f"{markdown(lines, skipped)}\n\n{context}\n\n{imports.markdown(costs)}")
    report = {
        "command": command,
        "quick": args.quick,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "seconds": seconds,
        "load_average": {"before": load_before, "after": load_after},
        "lines": [line.as_json() for line in lines],
        "skipped": skipped,
        "child_imports": [asdict(cost) for cost in costs],
    }
    path = args.json or (None if args.quick or args.only else DEFAULT_JSON)
    if path is not None:
        path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
        print(f"bench: wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
