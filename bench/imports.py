"""What the child imports beyond the floor, from ``python -X importtime -m isoagent.child``.

Each module the child imports and ``python -c "import msgspec"`` does not is
listed with its own import time (median over runs) and the first project
module (``isoagent.*``) above it in the import tree: the place
to make the import lazy.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
from dataclasses import dataclass

from bench.spawn import CHILD, FLAGS
from isoagent.parent.children.launch import PACKAGE_ROOT, child_environment

PROJECT = ("isoagent",)


@dataclass
class Imported:
    module: str
    self_us: int
    cumulative_us: int
    via: str  # the nearest project module that imports it, directly or not


def _importtime(argv: tuple[str, ...]) -> list[Imported]:
    with tempfile.TemporaryDirectory(prefix="isoagent-bench-") as tmp:
        done = subprocess.run(
            [argv[0], "-X", "importtime", *argv[1:]],
            stdin=subprocess.DEVNULL,  # the child reads EOF instead of a Task and exits
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=PACKAGE_ROOT,
            env=child_environment(tmp),
            timeout=60,
        )
    rows = [
        line.removeprefix("import time:").split("|")
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "self [us]" not in line
    ]
    out: list[Imported] = []
    stack: list[str] = []
    # importtime prints a module after everything it imports: reversed, parents come first
    for own, cumulative, name in reversed(rows):
        module = name.strip()
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        stack = [*stack[:depth], module]
        via = next((m for m in reversed(stack[:-1]) if m.startswith(PROJECT)), "")
        out.append(Imported(module, int(own), int(cumulative), via))
    return out


@dataclass
class ModuleCost:
    module: str
    self_ms: float  # median over runs
    cumulative_ms: float
    via: str


def beyond_floor(runs: int) -> list[ModuleCost]:
    """The child's imports that the floor does not make, slowest first."""
    floor = {i.module for i in _importtime((*FLAGS, "-c", "import msgspec"))}
    times: dict[str, list[int]] = {}
    first: dict[str, Imported] = {}
    for _ in range(runs):
        for imported in _importtime(CHILD):
            if imported.module not in floor:
                times.setdefault(imported.module, []).append(imported.self_us)
                first.setdefault(imported.module, imported)
    costs = [
        ModuleCost(
            name, statistics.median(us) / 1000, first[name].cumulative_us / 1000, first[name].via
        )
        for name, us in times.items()
    ]
    return sorted(costs, key=lambda cost: -cost.self_ms)


def markdown(costs: list[ModuleCost], top: int = 15) -> str:
    total = sum(cost.self_ms for cost in costs)
    out = [
        f"Child imports beyond the floor: {len(costs)} modules, {total:.1f} ms of their own "
        "import time (`python -X importtime -m isoagent.child`, median per module).",
        "",
        "| module | own ms | cumulative ms | pulled in by |",
        "|---|---:|---:|---|",
    ]
    out += [
        f"| {c.module} | {c.self_ms:.2f} | {c.cumulative_ms:.2f} | {c.via or '-'} |"
        for c in costs[:top]
    ]
    return "\n".join(out)
