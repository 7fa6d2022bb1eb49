"""CLI start: ``isoagent --help`` against ``python -c "import click"`` (the floor of any click
CLI), and ``isoagent agents``, against ``python -c pass``."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bench.stats import Line, Stat, ratio, reference
from isoagent.parent.children.launch import PACKAGE_ROOT

# The console script, run by this interpreter directly: a pyenv shim on PATH would add its own
# start-up time to every run.
SCRIPT = Path(sys.executable).parent / "isoagent"
SDK = ("anthropic", "httpx", "httpx2", "pydantic")
HEAVY = (*SDK, "asyncio", "ssl")


def _seconds(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=PACKAGE_ROOT, capture_output=True, check=True, timeout=60)
    return time.perf_counter() - started


def _imports(argv: list[str]) -> set[str]:
    """Top-level packages a command imports, from ``-X importtime``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        cwd=PACKAGE_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def cli_start(runs: int, skipped: list[str]) -> list[Line]:
    """The commands' lines; a command that cannot run is added to ``skipped`` instead."""
    if not SCRIPT.exists():
        skipped.append(f"CLI start: no console script at {SCRIPT} (pip install -e .)")
        return []
    commands = {"--help": [str(SCRIPT), "--help"], "agents": [str(SCRIPT), "agents"]}
    probe = subprocess.run([sys.executable, *commands["agents"]], capture_output=True)
    if probe.returncode != 0:
        del commands["agents"]
        skipped.append("CLI start: `isoagent agents` does not run yet (exit code "
                       f"{probe.returncode})")  # fmt: skip
    floors = {"pass": "pass", "click": "import click"}
    samples: dict[str, list[float]] = {name: [] for name in (*commands, *floors)}
    for _ in range(runs):
        for name, argv in commands.items():
            samples[name].append(_seconds([sys.executable, *argv]) * 1000)
        for name, code in floors.items():
            samples[name].append(_seconds([sys.executable, "-c", code]) * 1000)
    bare, click = Stat(samples.pop("pass"), "ms"), Stat(samples.pop("click"), "ms")
    lines = []
    for name, argv in commands.items():
        took = Stat(samples[name], "ms")
        heavy = sorted(set(HEAVY) & _imports(argv))
        if name == "--help":  # nothing heavy at all
            versus, target = ratio(took, click, "`import click`"), "≤ 1.5x `import click`"
            met = took.median <= 1.5 * click.median and not heavy
        else:  # a command may need asyncio, never the SDK
            versus = f"+{took.median - bare.median:.0f} ms over `python -c pass`"
            target, met = "≤ 200 ms", took.median <= 200 and not set(SDK) & set(heavy)
        lines.append(
            Line(
                "CLI start",
                f"`isoagent {name}`",
                took,
                versus,
                target,
                met,
                notes=[f"Imports {', '.join(heavy) or 'none of ' + ', '.join(HEAVY)}."],
            )
        )
    return [
        *lines,
        reference("CLI start", '`python -c "import click"`', click),
        reference("CLI start", "`python -c pass`", bare),
    ]
