"""Closing the terminal mid-batch (SIGHUP, the terminal gone): the batch ends as a hang-up
does, 129 and ``cancelled``, its finished lines kept, and the resume runs only the rest."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import subprocess
import time
from pathlib import Path

import pytest

from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS
from isoagent.parent.records.events import RunFinished, TaskRecord, decode_event
from isoagent.parent.session import Interrupted, Session
from isoagent.parent.settings import Settings
from isoagent.protocol import Limits, ModelCall, ModelReply, TextBlock, Usage
from tests.conftest import cli_env
from tests.support.cli import ISOAGENT, read_jsonl, run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply


def test_a_batch_whose_terminal_hangs_up_exits_129_cancelled_and_resumes(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """Its stdin, stdout and stderr a terminal that goes away: the first line it said there
    after the signal failed (EIO), and it exited 1 with its run unfinished."""

    def handler(req: Request) -> Reply:
        if req.first_user_text == "slow":
            return text_reply("slow answer", delay=30.0)
        return text_reply(f"did {req.first_user_text}")

    api_server.handler = handler
    lines = [
        {"id": "a", "prompt": "one"},
        {"id": "b", "prompt": "two"},
        {"id": "s", "prompt": "slow"},
    ]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    args = ["batch", "tasks.jsonl", "-o", "out.jsonl", "-C", str(workspace)]
    terminal, its_end = pty.openpty()
    batch = subprocess.Popen(
        [*ISOAGENT, *args], cwd=tmp_path, env=env, stdin=its_end, stdout=its_end,
        stderr=its_end, start_new_session=True,
    )  # fmt: skip
    os.close(its_end)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            any(r.first_user_text == "slow" for r in api_server.requests)
            and (tmp_path / "out.jsonl").exists()
            and len((tmp_path / "out.jsonl").read_text().splitlines()) == 2
        ):
            time.sleep(0.05)
        os.close(terminal)  # the terminal is gone
        batch.send_signal(signal.SIGHUP)
        assert batch.wait(60) == 129
    finally:
        if batch.poll() is None:
            batch.kill()
    assert sorted(r["id"] for r in read_jsonl(tmp_path / "out.jsonl")) == ["a", "b"]
    (run,) = [p for p in (workspace / ".isoagent" / "runs").iterdir() if p.is_dir()]
    last = decode_event((run / "run.jsonl").read_text().splitlines()[-1])
    assert isinstance(last, RunFinished) and last.result.status == "cancelled"
    assert "SIGHUP" in last.result.error

    api_server.handler = lambda req: text_reply(f"did {req.first_user_text}")
    asked = len(api_server.requests)
    done = run_cli(args, env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [r.first_user_text for r in api_server.requests[asked:]] == ["slow"]


class _AnswersThenSignals:
    """A model whose answer to task "answered" is its last (no tool), and which the signal
    reaches as that answer comes back; task "slow" waits for its answer meanwhile (it has
    asked before "answered" is answered: the two children start in either order)."""

    def __init__(self) -> None:
        self.session: Session | None = None
        self.asked: list[str] = []
        self.slow_asked = asyncio.Event()

    async def complete(self, call: ModelCall) -> ModelReply:
        first = call.messages[0].content[0]
        prompt = first.text if isinstance(first, TextBlock) else ""
        self.asked.append(prompt)
        if prompt == "slow":
            self.slow_asked.set()
            await asyncio.sleep(60)
        await self.slow_asked.wait()
        assert self.session is not None
        self.session.stop(signal.SIGTERM)  # as the answer is in: paid for
        return ModelReply(call.turn, [TextBlock("kept")], "end_turn", Usage(10, 5))

    async def aclose(self) -> None:
        pass


def test_a_child_whose_answer_is_in_when_the_signal_comes_is_kept_not_paid_again(
    workspace: Path,
) -> None:
    """Its answer paid for, its Result not yet sent: the signal ended it, its line was never
    written, and the resume paid for the same answer again. It may send its Result (its
    line is written); the child still waiting for its answer is ended, to run again."""
    from isoagent.parent.batch.input import BatchTask
    from isoagent.parent.batch.runner import BatchRun

    settings = Settings(workdir=workspace, model="m", limits=Limits(), agents=dict(BUILTIN_AGENTS))
    agent = BUILTIN_AGENTS["general-purpose"]
    tasks = [BatchTask("s", 1, "slow", agent), BatchTask("a", 2, "answered", agent)]
    written: list[TaskRecord] = []
    model = _AnswersThenSignals()

    async def run() -> None:
        async with Session.open(settings, source=model) as session:
            model.session = session
            runner = BatchRun(tasks, [], set(), None, written.append, say=lambda line: None)
            await runner.run(session)

    with pytest.raises(Interrupted):
        asyncio.run(run())
    assert [(r.id, r.status, r.summary) for r in written] == [("a", "ok", "kept")]
    assert sorted(model.asked) == ["answered", "slow"]
