"""A batch killed with SIGKILL at any point, then resumed with the same command, ends with every
task ``ok`` exactly once in ``-o``, and no task whose line was written runs again."""

from __future__ import annotations

import collections
import json
import random
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support.cli import read_jsonl, run_cli, start_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply
from tests.support.processes import wait_for

TASKS = [f"k{n}" for n in range(8)]
KILLS = 2  # before the resume that is let finish


def written_ok(out: Path) -> set[str]:
    """The ids with a whole ok line in ``out`` (a line cut by the kill is not one)."""
    if not out.exists():
        return set()
    ids = set()
    for line in out.read_bytes().split(b"\n")[:-1]:
        record = json.loads(line)
        if record["status"] == "ok":
            ids.add(record["id"])
    return ids


def kill_at(cli: subprocess.Popen[str], server: MessagesServer, calls: int, wait: float) -> None:
    """SIGKILL ``cli`` ``wait`` seconds after the server has seen ``calls`` requests in all
    (unless it ended by then): a point of the batch's start, run or end."""
    wait_for(lambda: len(server.requests) >= calls or cli.poll() is not None, 60)
    try:
        cli.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        cli.send_signal(signal.SIGKILL)
    cli.communicate(timeout=60)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_batch_killed_at_random_points_resumes_to_every_task_ok_exactly_once(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, seed: int
) -> None:
    rng = random.Random(seed)
    delays = {task: rng.uniform(0.05, 0.4) for task in TASKS}

    def handler(req: Request) -> Reply:
        return text_reply(f"did: {req.first_user_text}", delay=delays[req.first_user_text])

    api_server.handler = handler
    (tmp_path / "tasks.jsonl").write_text(
        "".join(json.dumps({"id": task, "prompt": task}) + "\n" for task in TASKS)
    )
    out = tmp_path / "out.jsonl"
    args = ["batch", "tasks.jsonl", "-j", "3", "-o", str(out), "-C", str(workspace)]
    env = cli_env(api_server, HOME=str(tmp_path / "home"))

    for _ in range(KILLS):
        done_before = written_ok(out)
        asked = len(api_server.requests)
        calls = asked + rng.randrange(len(TASKS) - len(done_before) + 1)
        kill_at(start_cli(args, env, cwd=tmp_path), api_server, calls, rng.uniform(0.0, 0.5))
        rerun = {r.first_user_text for r in api_server.requests[asked:]} & done_before
        assert not rerun, f"tasks whose line was written ran again: {rerun}"

    done_before = written_ok(out)
    asked = len(api_server.requests)
    last = run_cli(args, env, cwd=tmp_path)
    assert last.returncode == 0, last.stderr
    assert not {r.first_user_text for r in api_server.requests[asked:]} & done_before
    lines = collections.Counter((r["id"], r["status"]) for r in read_jsonl(out))
    assert lines == {(task, "ok"): 1 for task in TASKS}
