"""``isoagent.batch``/``abatch``: ``isoagent batch``'s runner from Python, one session for
every task, each task's line as it finishes, resumed from ``output``."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from pathlib import Path

import pytest

import isoagent
from tests.support.api_env import use_server
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply


@pytest.fixture(autouse=True)
def env(api_server: MessagesServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_server(monkeypatch, api_server, tmp_path / "home")


def test_a_hundred_tasks_at_sixteen_resume_after_a_stop_without_running_a_done_one_again(
    api_server: MessagesServer, workspace: Path, tmp_path: Path
) -> None:
    served: Counter[str] = Counter()
    lock = threading.Lock()

    def answer(req: Request) -> Reply:
        with lock:
            served[req.first_user_text] += 1
        return text_reply(req.first_user_text.upper())

    api_server.handler = answer
    tasks = [f"task {n}" for n in range(100)]
    output = tmp_path / "results.jsonl"
    first = []
    for record in isoagent.batch(tasks, jobs=16, output=output, workdir=workspace):
        first.append(record)
        if len(first) == 30:
            break  # as a Ctrl-C would: the tasks still running are ended, unwritten
    # each line is in output before it is yielded; the tasks run on meanwhile
    written = [json.loads(line) for line in output.read_text().splitlines()]
    assert {r.id for r in first} <= {line["id"] for line in written}
    done_first = {line["summary"].lower() for line in written}
    resumed = list(isoagent.batch(tasks, jobs=16, output=output, workdir=workspace))
    # every task's record: the finished ones from the file, first, then the rest as they end
    assert {r.id for r in resumed[: len(written)]} == {line["id"] for line in written}
    rest = resumed[len(written) :]
    assert len(resumed) == 100
    assert {r.status for r in resumed} == {"ok"}
    assert sorted([*done_first, *(r.summary.lower() for r in rest)]) == sorted(tasks)
    for prompt in done_first:  # a finished task is never asked of the model again
        assert served[prompt] == 1
    assert len(output.read_text().splitlines()) == 100
    runs = [path for path in (workspace / ".isoagent" / "runs").iterdir() if path.is_dir()]
    assert len(runs) == 2  # one session (fork server, gateway, run folder) per batch


def test_abatch_yields_each_task_as_it_finishes(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler = lambda req: text_reply(
        req.first_user_text, delay=3.0 if req.first_user_text == "slow" else 0.0
    )

    async def collect() -> list[isoagent.TaskRecord]:
        tasks = [{"id": "s", "prompt": "slow"}, {"id": "f", "prompt": "fast"}]
        return [r async for r in isoagent.abatch(tasks, jobs=2, workdir=workspace)]

    records = asyncio.run(collect())
    assert [(r.id, r.summary) for r in records] == [("f", "fast"), ("s", "slow")]


def test_a_bad_task_is_an_invalid_record_and_the_others_run(
    api_server: MessagesServer, workspace: Path
) -> None:
    tasks = ["fine", {"prompt": "x", "agent": "nope"}]
    records = {r.line: r for r in isoagent.batch(tasks, workdir=workspace)}
    assert records[1].status == "ok"
    assert records[2].status == "invalid" and "nope" in records[2].error
