"""Running the CLI with children on other hosts, as the remote tests all do."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.support.cli import run_cli


def run_batch(
    count: int, args: list[str], env: dict[str, str], cwd: Path
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """``isoagent batch`` over ``count`` tasks (prompts t0, t1, ...) with ``args``; the
    finished command and its output records."""
    tasks = cwd / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": n, "prompt": f"t{n}"}) + "\n" for n in range(count)))
    done = run_cli(["batch", str(tasks), *args], env, cwd=cwd, timeout=180)
    return done, [json.loads(line) for line in done.stdout.splitlines()]


def run_task(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``isoagent task go`` with ``args``."""
    return run_cli(["task", "go", *args], env, cwd=cwd, timeout=180)
