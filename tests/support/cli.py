"""Running the real ``isoagent`` CLI as a subprocess, as a user's shell would."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

ISOAGENT = [sys.executable, "-m", "isoagent"]


def run_cli(
    args: list[str],
    env: dict[str, str],
    *,
    cwd: Path,
    input: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ISOAGENT, *args],
        env=env,
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_cli(args: list[str], env: dict[str, str], *, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*ISOAGENT, *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_dirs(workdir: Path) -> list[Path]:
    return sorted((workdir / ".isoagent" / "runs").iterdir())


def shell(
    pipeline: str, env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run a real bash pipeline in which ``isoagent`` is this checkout's CLI."""
    script = f'isoagent() {{ {shlex.join(ISOAGENT)} "$@"; }}\nset -o pipefail\n{pipeline}'
    return subprocess.run(
        ["bash", "-c", script],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
