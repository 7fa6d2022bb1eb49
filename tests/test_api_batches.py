"""``isoagent batch --api-batches``: every child's model turn goes into Anthropic Message
Batches, at the batch price; and the test server's Message Batches API it is tested against."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anthropic
import pytest

import isoagent
from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS
from isoagent.child.agent.loop import text_of
from isoagent.parent.children.child_run import ChildRequest
from isoagent.parent.model import batches
from isoagent.parent.model.batches import BatchSource
from isoagent.parent.model.sdk import AnthropicSource
from isoagent.parent.session import Session
from isoagent.parent.settings import Settings
from isoagent.protocol import Limits, Message, ModelCall, TextBlock
from tests.conftest import base_env, cli_env
from tests.support.api_env import use_server
from tests.support.cli import read_jsonl, run_cli, start_cli
from tests.support.messages_server import (
    MessagesServer,
    Reply,
    Request,
    error_reply,
    text_reply,
    tool_reply,
    unused_url,
)


def _params(text: str) -> dict[str, object]:
    return {
        "model": "claude-test",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": text}],
    }


def test_the_test_server_speaks_the_message_batches_api_through_the_sdk(
    api_server: MessagesServer,
) -> None:
    def script(request: Request) -> list[Reply]:
        if request.first_user_text == "expires":
            return [Reply(batch_result="expired"), text_reply("late")]
        if request.first_user_text == "errs":
            return [error_reply(529, "overloaded_error", "Overloaded")]
        return [text_reply(f"did {request.first_user_text}")]

    api_server.handler = script
    api_server.batch_delay = 0.2

    async def talk() -> None:
        client = anthropic.AsyncAnthropic(base_url=api_server.base_url, api_key="test-key")
        batches = client.messages.batches
        texts = ["a", "expires", "errs", "b"]
        sent = [{"custom_id": f"r{n}", "params": _params(t)} for n, t in enumerate(texts)]
        batch = await batches.create(requests=sent)  # type: ignore[arg-type]
        assert batch.processing_status == "in_progress"
        assert batch.request_counts.processing == 4 and batch.results_url is None
        kept = await batches.create(requests=sent[:1])  # type: ignore[arg-type]
        assert (await batches.cancel(kept.id)).processing_status == "canceling"
        while (batch := await batches.retrieve(batch.id)).processing_status != "ended":
            await asyncio.sleep(0.05)
        counts = batch.request_counts
        assert (counts.succeeded, counts.errored, counts.expired, counts.processing) == (2, 1, 1, 0)
        results = {line.custom_id: line.result async for line in await batches.results(batch.id)}
        assert (
            results["r0"].type == "succeeded" and results["r0"].message.content[0].text == "did a"
        )
        assert results["r1"].type == "expired"
        assert results["r2"].type == "errored"
        assert results["r2"].error.error.type == "overloaded_error"
        canceled = [line.result.type async for line in await batches.results(kept.id)]
        assert canceled == ["canceled"]
        listed = await batches.list()
        assert {b.id for b in listed.data} == {batch.id, kept.id}
        await client.close()

    asyncio.run(talk())
    # each batched request was answered by the handler and recorded, with its custom_id
    assert sorted(r.custom_id for r in api_server.requests) == ["r0", "r1", "r2", "r3"]


def _three_turns(request: Request) -> Reply:
    """Each task: two bash calls, then its answer."""
    if request.turn < 2:
        return tool_reply("Bash", {"command": f"echo turn {request.turn}"})
    return text_reply(f"did: {request.first_user_text}")


def _batch(
    server: MessagesServer, tmp_path: Path, workspace: Path, prompts: list[str], *flags: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]:
    """``isoagent batch --api-batches`` of ``prompts`` (ids: the prompts), every task at once;
    its run and its result lines by id."""
    lines = "".join(json.dumps({"id": p, "prompt": p}) + "\n" for p in prompts)
    (tmp_path / "tasks.jsonl").write_text(lines)
    args = ["batch", "tasks.jsonl", "-j", str(len(prompts)), "-o", "out.jsonl"]
    args += ["-C", str(workspace), "--api-batches", *flags]
    done = run_cli(args, cli_env(server, HOME=str(tmp_path / "home")), cwd=tmp_path)
    return done, {r["id"]: r for r in read_jsonl(tmp_path / "out.jsonl")}


def test_every_round_of_the_batch_is_one_message_batch_sent_when_every_task_waits(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = _three_turns
    api_server.batch_delay = 0.2
    prompts = [f"task-{n}" for n in range(6)]
    # a window longer than the tasks' timeout: only "every task waits" can send a batch
    done, records = _batch(
        api_server, tmp_path, workspace, prompts, "--batch-window", "600", "--timeout", "30"
    )
    assert done.returncode == 0, done.stderr
    assert {r["status"] for r in records.values()} == {"ok"}
    assert {r["summary"] for r in records.values()} == {f"did: {p}" for p in prompts}
    assert [len(b.requests) for b in api_server.batches.values()] == [6, 6, 6]  # 3 rounds
    assert all(r.custom_id for r in api_server.requests)  # none went to /v1/messages
    assert "isoagent: sent 3 Message Batches, 18 requests\n" in done.stderr
    said = [line for line in done.stderr.splitlines() if "round 1: batch msgbatch_" in line]
    assert len(said) == 1 and said[0].endswith(" 0/6 done, 0 s"), done.stderr


def test_errored_and_expired_requests_go_in_the_next_batch_and_are_counted(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    def script(request: Request) -> list[Reply]:
        answer = text_reply(f"did: {request.first_user_text}")
        if request.first_user_text == "expires":
            return [Reply(batch_result="expired"), answer]
        if request.first_user_text == "overloaded":
            return [error_reply(529, "overloaded_error", "Overloaded"), answer]
        if request.first_user_text == "refused":  # would be refused again: not sent again
            return [error_reply(400, "invalid_request_error", "prompt is too long"), answer]
        return [answer]

    api_server.handler = script
    done, records = _batch(
        api_server, tmp_path, workspace, ["expires", "overloaded", "refused", "fine"]
    )
    assert done.returncode == 6, done.stderr  # a task failed
    assert [len(b.requests) for b in api_server.batches.values()] == [4, 2]
    assert {k: (r["status"], r["retries"]) for k, r in records.items()} == {
        "expires": ("ok", 1),
        "overloaded": ("ok", 1),
        "refused": ("error", 0),
        "fine": ("ok", 0),
    }
    assert records["expires"]["summary"] == "did: expires"
    assert "invalid_request_error: prompt is too long" in records["refused"]["error"]
    summary = "sent 2 Message Batches, 6 requests (1 errored, 1 expired: sent again)"
    assert f"isoagent: {summary}\n" in done.stderr


def test_a_task_whose_requests_keep_expiring_fails_at_its_timeout_alone(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    def script(request: Request) -> Reply:
        if request.first_user_text == "never":
            return Reply(batch_result="expired")
        return _three_turns(request)

    api_server.handler = script
    api_server.batch_delay = 0.1
    done, records = _batch(
        api_server, tmp_path, workspace, ["never", "a", "b"], "--batch-window", "0.2",
        "--timeout", "4",
    )  # fmt: skip
    assert done.returncode == 6, done.stderr  # a task failed
    assert records["never"]["status"] == "timeout", records["never"]
    assert [records[k]["status"] for k in ("a", "b")] == ["ok", "ok"]
    expired = sum(r.first_user_text == "never" for r in api_server.requests)
    assert expired >= 2  # sent again, batch after batch, until its timeout


def _spend(server: MessagesServer, workspace: Path, api_batches: bool) -> tuple[str, float]:
    """A three-turn task in a session with a $100 budget: its status, and what it cost."""
    settings = Settings(
        workdir=workspace, model="claude-sonnet-5", limits=Limits(), agents=dict(BUILTIN_AGENTS),
        max_budget_usd=100, api_batches=api_batches, batch_window=0.1,
    )  # fmt: skip

    async def run() -> tuple[str, float]:
        async with Session.open(settings) as session:
            agent = BUILTIN_AGENTS["general-purpose"]
            finished = await session.supervisor.run(ChildRequest("priced", "priced", agent))
            assert session.cost_budget is not None
            return finished.result.status, session.cost_budget.spent

    return asyncio.run(run())


def test_the_budget_prices_a_batchs_tokens_at_half(
    api_server: MessagesServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each turn reads a million input tokens: $2 at sonnet-5's price, $1 in a batch
    def script(request: Request) -> Reply:
        reply = _three_turns(request)
        reply.usage = (1_000_000, 0)
        return reply

    api_server.handler = script
    use_server(monkeypatch, api_server, tmp_path / "home")
    assert _spend(api_server, workspace, api_batches=True) == ("ok", 3.0)
    assert _spend(api_server, workspace, api_batches=False) == ("ok", 6.0)
    assert len(api_server.batches) == 3


def test_an_interrupted_batch_without_o_cancels_its_message_batches_in_flight(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = _three_turns
    api_server.batch_delay = 600.0  # it would not end before the test does
    (tmp_path / "tasks.txt").write_text("one\ntwo\n")
    args = ["batch", "tasks.txt", "-j", "2", "-C", str(workspace)]  # no -o: nothing resumes
    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    cli = start_cli([*args, "--api-batches"], env, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not api_server.batches and time.monotonic() < deadline and cli.poll() is None:
        time.sleep(0.05)
    cli.send_signal(signal.SIGINT)
    _, stderr = cli.communicate(timeout=60)
    assert cli.returncode == 130, stderr
    (batch,) = api_server.batches.values()
    assert batch.cancel_initiated is not None  # its turns are not paid for nothing
    assert "Traceback" not in stderr


def test_a_server_that_never_answers_fails_the_tasks_at_once_in_one_clear_error(
    tmp_path: Path, workspace: Path
) -> None:
    (tmp_path / "tasks.txt").write_text("one\ntwo\n")
    env = base_env(ANTHROPIC_BASE_URL=unused_url(), ANTHROPIC_API_KEY="test-key")
    args = ["batch", "tasks.txt", "-j", "2", "-o", "out.jsonl", "-C", str(workspace)]
    done = run_cli(
        [*args, "--api-batches", "--batch-window", "0", "--timeout", "60"], env, cwd=tmp_path
    )
    assert done.returncode == 6, done.stderr
    records = read_jsonl(tmp_path / "out.jsonl")
    assert [r["status"] for r in records] == ["error", "error"]  # not their timeout
    assert all("it has never answered" in r["error"] for r in records), records


def _batches_kept(runs: Path) -> int:
    """Message Batches in the journal: once the API has taken one, its id is there."""
    kept = [line for path in runs.glob("batch-*.batches.jsonl") for line in path.open("rb")]
    return sum(b'"type":"Sent"' in line for line in kept)


def test_a_batch_killed_with_a_message_batch_in_flight_resumes_without_paying_a_turn_twice(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = _three_turns
    api_server.batch_delay = 0.2
    prompts = ["one", "two", "three"]
    (tmp_path / "tasks.txt").write_text("".join(f"{p}\n" for p in prompts))
    args = ["batch", "tasks.txt", "-j", "3", "-o", "out.jsonl", "-C", str(workspace)]
    args += ["--api-batches", "--batch-window", "30"]
    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    cli = start_cli(args, env, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not api_server.batches and time.monotonic() < deadline:
        time.sleep(0.02)
    api_server.batch_delay = 3.0  # the second round's batch is still in flight when killed
    journal = workspace / ".isoagent" / "runs"
    while _batches_kept(journal) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    cli.kill()
    cli.communicate(timeout=30)
    assert len(api_server.batches) == 2
    assert not (tmp_path / "out.jsonl").exists() or not read_jsonl(tmp_path / "out.jsonl")

    done = run_cli(args, env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    records = read_jsonl(tmp_path / "out.jsonl")
    assert sorted(r["summary"] for r in records) == sorted(f"did: {p}" for p in prompts)
    assert {r["status"] for r in records} == {"ok"}
    # each turn of each task was asked once: the first two rounds of the killed run,
    # the last one of the rerun
    turns = [(r.first_user_text, r.turn) for r in api_server.requests]
    assert sorted(turns) == sorted((p, turn) for p in prompts for turn in range(3))
    assert [len(b.requests) for b in api_server.batches.values()] == [3, 3, 3]
    assert "6 turns answered from an earlier run's Message Batches" in done.stderr


def test_a_batch_recorded_in_message_batches_replays_without_a_server(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = _three_turns
    (tmp_path / "tasks.txt").write_text("one\ntwo\n")
    args = ["batch", "tasks.txt", "-j", "2", "-C", str(workspace), "--api-batches"]
    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    recorded = run_cli([*args, "--record", "calls.jsonl"], env, cwd=tmp_path)
    assert recorded.returncode == 0, recorded.stderr
    assert len(api_server.batches) == 3
    offline = {**env, "ANTHROPIC_BASE_URL": unused_url()}
    replayed = run_cli([*args, "--replay", "calls.jsonl"], offline, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    summaries = sorted(json.loads(line)["summary"] for line in replayed.stdout.splitlines())
    assert summaries == ["did: one", "did: two"]
    assert len(api_server.batches) == 3  # the replay sent none


def test_a_queue_larger_than_a_message_batch_may_be_is_sent_as_several(
    api_server: MessagesServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_server(monkeypatch, api_server, tmp_path / "home")
    monkeypatch.setattr(batches, "MAX_REQUESTS", 2)

    async def ask() -> list[str]:
        source = BatchSource(AnthropicSource(), window=30.0, live=lambda: 5)
        calls = [
            ModelCall(0, "claude-test", 16, "", [Message("user", [TextBlock(f"n{n}")])])
            for n in range(5)
        ]
        replies = await asyncio.gather(*(source.complete(call) for call in calls))
        await source.aclose()
        return [text_of(reply.content) for reply in replies]

    assert asyncio.run(ask()) == ["ok"] * 5
    assert [len(b.requests) for b in api_server.batches.values()] == [2, 2, 1]


def test_the_python_batch_api_sends_message_batches_too(
    api_server: MessagesServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_server(monkeypatch, api_server, tmp_path / "home")
    api_server.handler = _three_turns
    records = list(
        isoagent.batch(
            ["one", "two"], jobs=2, workdir=workspace, output=tmp_path / "out.jsonl",
            api_batches=True, batch_window=30.0,
        )
    )  # fmt: skip
    assert sorted(r.summary for r in records) == ["did: one", "did: two"]
    assert [len(b.requests) for b in api_server.batches.values()] == [2, 2, 2]
    assert list((workspace / ".isoagent" / "runs").glob("batch-*.batches.jsonl"))


def test_every_cost_figure_of_a_batch_run_prices_its_tokens_at_the_batch_rate(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """The budget and the lines priced a Message Batch's tokens at half; `logs` (and the
    API's Result, telemetry) at the full rate. Each now reads the run's one rate."""
    from isoagent.parent.model.aliases import resolve_model
    from isoagent.parent.model.prices import BATCH_PRICE, cost_usd
    from isoagent.parent.records.past_run import PastRun
    from isoagent.protocol import Usage

    api_server.handler = _three_turns
    api_server.batch_delay = 0.1
    done, records = _batch(api_server, tmp_path, workspace, ["one"], "--model", "sonnet")
    assert done.returncode == 0, done.stderr
    line = records["one"]
    usage = Usage(**line["tokens"])
    expected = cost_usd(resolve_model("sonnet"), usage, BATCH_PRICE)
    assert line["cost_usd"] == pytest.approx(expected) and expected > 0
    (run,) = [p for p in (workspace / ".isoagent" / "runs").iterdir() if p.is_dir()]
    logged = PastRun.read(run)
    assert sum(child.cost for child in logged.children) == pytest.approx(expected)
