"""The Python API checks what it is given at the call, runs its sync calls inside a running
event loop (a Jupyter cell) on a worker thread, and writes nothing to stderr."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path

import pytest

import isoagent
from tests.support.api_env import use_server
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply


@pytest.fixture(autouse=True)
def env(api_server: MessagesServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_server(monkeypatch, api_server, tmp_path / "home")


def test_a_file_name_where_tasks_are_expected_is_refused_and_read_tasks_reads_it(
    api_server: MessagesServer, workspace: Path, tmp_path: Path
) -> None:
    """isoagent.batch("tasks.jsonl") ran one paid task per character of the string."""
    api_server.handler = lambda req: text_reply(f"did {req.first_user_text}")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "one"}\ntwo\n')
    with pytest.raises(isoagent.OptionError, match="read_tasks"):
        isoagent.batch(str(tasks), workdir=workspace)
    assert api_server.requests == []
    records = {r.id: r for r in isoagent.batch(isoagent.read_tasks(tasks), workdir=workspace)}
    assert records["a"].summary == "did one"
    assert len(records) == 2 and {r.status for r in records.values()} == {"ok"}


def test_a_prompt_that_is_no_str_and_bad_jobs_are_named_errors_at_the_call(
    workspace: Path,
) -> None:
    """isoagent.task(None) raised AttributeError; batch(jobs=0) failed only when iterated,
    naming max_parallel."""
    with pytest.raises(isoagent.OptionError, match="the prompt must be a str, not NoneType"):
        isoagent.task(None, workdir=workspace)  # type: ignore[arg-type]
    for jobs in (0, -1, 2.5, True):
        with pytest.raises(isoagent.OptionError, match="jobs must be a whole number"):
            isoagent.batch(["x"], jobs=jobs, workdir=workspace)  # type: ignore[arg-type]


def test_the_sync_api_inside_a_running_event_loop_runs_on_a_worker_thread(
    api_server: MessagesServer, workspace: Path
) -> None:
    """As a Jupyter cell calls it: the loop is running in this thread."""
    asked_from: list[str] = []

    def answer(req: Request) -> Reply:
        asked_from.append(req.first_user_text)
        return text_reply(f"did {req.first_user_text}")

    api_server.handler = answer

    async def cell() -> tuple[str, list[str]]:
        result = isoagent.task("in a cell", workdir=workspace)
        records = list(isoagent.batch(["one", "two"], workdir=workspace))
        return result.result, sorted(r.summary for r in records)

    loop_thread = threading.get_ident()
    assert asyncio.run(cell()) == ("did in a cell", ["did one", "did two"])
    assert threading.get_ident() == loop_thread
    assert sorted(asked_from) == ["in a cell", "one", "two"]


def test_a_library_batch_writes_nothing_to_stderr_and_its_notices_go_to_the_logger(
    api_server: MessagesServer,
    workspace: Path,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    api_server.handler = lambda req: text_reply("done")
    output = tmp_path / "out.jsonl"
    tasks = ["one", {"prompt": "x", "agent": "nope"}]
    assert len(list(isoagent.batch(tasks, output=output, workdir=workspace))) == 2
    with caplog.at_level(logging.INFO, logger="isoagent"):
        again = list(isoagent.batch([*tasks, "three"], output=output, workdir=workspace))
    # a resumed batch yields every task's record: those done from the file
    assert sorted(r.summary for r in again if r.status == "ok") == ["done", "done"]
    assert len(again) == 3
    assert capfd.readouterr().err == ""
    assert any("batch:" in message for message in caplog.messages)
    assert json.loads(output.read_text().splitlines()[0])["sig"]
