"""The Python API page's examples of isoagent embedded in a program (a thread pool, an asyncio
service, a batch), run as the page has them; the click command is in test_python_api."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.api_env import use_server
from tests.support.docs_examples import readme_example
from tests.support.messages_server import MessagesServer, Reply, Request, error_reply, text_reply


@pytest.fixture(autouse=True)
def in_workspace(
    api_server: MessagesServer, monkeypatch: pytest.MonkeyPatch, workspace: Path, tmp_path: Path
) -> None:
    use_server(monkeypatch, api_server, tmp_path / "home")
    monkeypatch.chdir(workspace)


def run_example(name: str) -> None:
    exec(compile(readme_example(name), "python-api.md", "exec"), {"__name__": "__main__"})


def test_the_readmes_thread_pool(
    api_server: MessagesServer, capsys: pytest.CaptureFixture[str]
) -> None:
    api_server.handler = lambda req: text_reply(f"reviewed: {req.first_user_text}")
    run_example("threads")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" $")[0] for line in lines] == ["app.py: ok", "db.py: ok", "web.py: ok"]
    assert all(float(line.split(" $")[1]) > 0 for line in lines)


def test_the_readmes_asyncio_service_handles_each_failure_by_its_class(
    api_server: MessagesServer, capsys: pytest.CaptureFixture[str]
) -> None:
    def handler(req: Request) -> Reply:
        if "db.py" in req.first_user_text:
            return error_reply(404, "not_found_error", f"model: {req.model}")
        return text_reply("in auth.py")

    api_server.handler = handler
    run_example("service")
    auth, db = capsys.readouterr().out.splitlines()
    assert auth == "in auth.py"
    assert db.startswith("failed (ModelNotFoundError): error: ")


def test_the_readmes_batch_resumes_without_running_a_done_task_again(
    api_server: MessagesServer, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api_server.handler = lambda req: text_reply(f"reviewed: {req.first_user_text}")
    run_example("batch")
    lines = sorted(capsys.readouterr().out.splitlines())
    assert lines == ["app.py ok reviewed: Review app.py", "db.py ok reviewed: Review db.py"]
    asked = len(api_server.requests)
    run_example("batch")  # again: both are done, their records from the file
    assert sorted(capsys.readouterr().out.splitlines()) == lines
    assert len(api_server.requests) == asked
    written = (workspace / "reviews.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in written) == ["app.py", "db.py"]
