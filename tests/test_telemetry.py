"""OpenTelemetry: one trace per run, whose spans cross the process boundary, received by an
OTLP/HTTP receiver on 127.0.0.1 and decoded with the official protobuf classes."""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from isoagent.parent.telemetry.config import telemetry_enabled
from isoagent.parent.telemetry.otel import OtelExport
from isoagent.protocol import MAX_SPANS, Span
from tests.conftest import cli_env
from tests.support.cli import read_jsonl, run_cli, run_cli_listing_modules, run_dirs
from tests.support.messages_server import (
    MessagesServer,
    Reply,
    Request,
    text_reply,
    tool_reply,
    tools_reply,
)
from tests.support.scripts import delegating


class Received:
    """What an OTLP receiver was sent: each span with its resource's attributes."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metrics: dict[str, float] = {}
        self.requests = 0

    def take(self, path: str, body: bytes) -> None:
        self.requests += 1
        if path == "/v1/traces":
            traces = ExportTraceServiceRequest.FromString(body)
            for resource in traces.resource_spans:
                process = _attributes(resource.resource.attributes)
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        self.spans.append(
                            {
                                "name": span.name,
                                "trace": span.trace_id.hex(),
                                "id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex(),
                                "start": span.start_time_unix_nano,
                                "end": span.end_time_unix_nano,
                                "error": span.status.code == 2,
                                "attributes": _attributes(span.attributes),
                                "resource": process,
                            }
                        )
        elif path == "/v1/metrics":
            metrics = ExportMetricsServiceRequest.FromString(body)
            for resource in metrics.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        points = metric.sum.data_points
                        total = sum(p.as_int or p.as_double for p in points)
                        self.metrics[metric.name] = total  # cumulative: the last is the total

    def named(self, prefix: str) -> list[dict[str, Any]]:
        return [span for span in self.spans if span["name"].startswith(prefix)]


def _attributes(pairs: Any) -> dict[str, Any]:
    values = {}
    for pair in pairs:
        kind = pair.value.WhichOneof("value")
        values[pair.key] = getattr(pair.value, kind) if kind else None
    return values


@pytest.fixture
def receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP receiver (protobuf) on 127.0.0.1: its endpoint and what it received."""
    received = Received()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                received.take(self.path, body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def telemetry_env(server: MessagesServer, tmp_path: Path, endpoint: str) -> dict[str, str]:
    return cli_env(
        server,
        HOME=str(tmp_path / "home"),
        CLAUDE_CODE_ENABLE_TELEMETRY="1",
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_RESOURCE_ATTRIBUTES="team=tests",
    )


def delegate_reading(req: Request) -> Reply:
    """The parent delegates two tasks in one turn (they run at once); each child reads a
    file and answers."""
    if req.is_parent:
        if req.turn == 0:
            task = {"description": "read", "prompt": "read notes", "subagent_type": "Explore"}
            return tools_reply([("Agent", task), ("Agent", task)], usage=(120, 30))
        return text_reply("done", usage=(200, 7))
    if req.turn == 0:
        return tool_reply("Read", {"file_path": "notes.txt"}, usage=(50, 11))
    answer = text_reply("the notes say 42", usage=(70, 13))
    answer.cache = (5, 9)  # prompt-cache tokens written, read
    return answer


TOKENS = {  # the transcripts' usage keys, and the spans' attributes
    "input_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    "cache_creation_input_tokens": "gen_ai.usage.cache_creation.input_tokens",
    "cache_read_input_tokens": "gen_ai.usage.cache_read.input_tokens",
}


def transcript_usage(run: Path) -> dict[str, int]:
    """Every model reply's usage in the run folder's transcripts, summed."""
    total = dict.fromkeys(TOKENS, 0)
    for path in run.glob("*.jsonl"):
        for event in read_jsonl(path):
            if event["type"] == "message" and event.get("usage"):
                for key in total:
                    total[key] += event["usage"][key]
    return total


def test_a_run_is_one_trace_whose_spans_cross_into_its_child(
    api_server: MessagesServer,
    tmp_path: Path,
    workspace: Path,
    receiver: tuple[str, Received],
) -> None:
    endpoint, received = receiver
    (workspace / "notes.txt").write_text("42\n")
    api_server.handler = delegate_reading
    env = telemetry_env(api_server, tmp_path, endpoint)
    done = run_cli(
        ["run", "go", "-C", str(workspace), "--output-format", "json"], env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr

    spans = received.spans
    traces = {span["trace"] for span in spans}
    assert len(traces) == 1
    (trace,) = traces
    assert json.loads(done.stdout)["trace_id"] == trace
    (run,) = run_dirs(workspace)
    assert read_jsonl(run / "run.jsonl")[0]["trace_id"] == trace

    by_id = {span["id"]: span for span in spans}
    (root,) = [span for span in spans if not span["parent"]]
    assert root["name"] == "isoagent" and root["resource"]["team"] == "tests"
    (parent_agent,) = received.named("invoke_agent parent")
    assert parent_agent["parent"] == root["id"]
    task_calls = received.named("execute_tool Agent")
    child_agents = received.named("invoke_agent Explore")
    child_tools = received.named("execute_tool Read")
    assert len(task_calls) == len(child_agents) == len(child_tools) == 2
    assert all(call["parent"] == parent_agent["id"] for call in task_calls)
    # each child under its own task call, its tool call under it
    assert {agent["parent"] for agent in child_agents} == {call["id"] for call in task_calls}
    assert {tool["parent"] for tool in child_tools} == {agent["id"] for agent in child_agents}
    # made in three processes: a child's spans are its own process's resource
    parent_pid = root["resource"]["process.pid"]
    child_pids = {span["resource"]["process.pid"] for span in child_agents + child_tools}
    assert len(child_pids) == 2 and parent_pid not in child_pids
    assert all(agent["attributes"]["isoagent.status"] == "ok" for agent in child_agents)
    # each model call under the agent that made it, with its tokens
    chats = received.named("chat ")
    assert sorted(by_id[chat["parent"]]["name"] for chat in chats) == [
        *["invoke_agent Explore"] * 4,
        *["invoke_agent parent"] * 2,
    ]
    usage = transcript_usage(run)
    assert list(usage.values()) == [560, 85, 10, 18]
    for key, attribute in TOKENS.items():
        assert sum(chat["attributes"][attribute] for chat in chats) == usage[key]
    assert all(chat["attributes"]["gen_ai.agent.name"] for chat in chats)
    assert received.metrics["isoagent.token.usage"] == 560 + 85 + 10 + 18
    assert received.metrics["isoagent.task.count"] == 2
    for span in spans:  # every span inside the run's
        assert root["start"] <= span["start"] <= span["end"] <= root["end"]


def test_telemetry_off_exports_nothing_and_imports_no_opentelemetry(
    api_server: MessagesServer,
    tmp_path: Path,
    workspace: Path,
    receiver: tuple[str, Received],
) -> None:
    """An endpoint alone turns nothing on: it is often set for other programs."""
    endpoint, received = receiver
    (workspace / "notes.txt").write_text("42\n")
    api_server.handler = delegate_reading
    env = cli_env(api_server, HOME=str(tmp_path / "home"), OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    args = ["run", "go", "-C", str(workspace), "--output-format", "json"]
    done, modules = run_cli_listing_modules(args, env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not [module for module in modules if module.startswith("opentelemetry")]
    assert received.requests == 0
    assert "trace_id" not in json.loads(done.stdout.splitlines()[-1])
    (run,) = run_dirs(workspace)
    assert "trace_id" not in read_jsonl(run / "run.jsonl")[0]


def test_a_childs_forged_spans_are_bounded_and_stay_under_its_agent_span(
    api_server: MessagesServer,
    tmp_path: Path,
    workspace: Path,
    receiver: tuple[str, Received],
) -> None:
    """A child sends thousands of spans with oversized names and attributes, times out of
    its life, and parents it never made (tests/support/faulty_children ``forge-spans``)."""
    endpoint, received = receiver
    api_server.handler = delegating([text_reply("never asked")])
    forger = f"{sys.executable} -m tests.support.faulty_children forge-spans {tmp_path}"
    env = telemetry_env(api_server, tmp_path, endpoint) | {"ISOAGENT_CHILD_COMMAND": forger}
    done = run_cli(["run", "go", "-C", str(workspace)], env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "trace").read_text() == "True"  # its Task asked for spans

    spans = received.spans
    assert len({span["trace"] for span in spans}) == 1
    assert len({span["id"] for span in spans}) == len(spans)  # no id given twice
    by_id = {span["id"]: span for span in spans}
    (root,) = [span for span in spans if not span["parent"]]
    (task_call,) = received.named("execute_tool Agent")
    (agent,) = [span for span in spans if span["parent"] == task_call["id"]]
    assert agent["name"] == "invoke_agent general-purpose"  # the parent's, not the child's
    assert agent["attributes"]["gen_ai.agent.name"] == "general-purpose"
    assert agent["attributes"]["isoagent.child"] == "001"
    assert agent["attributes"]["isoagent.spans_dropped"] > 0
    child_pid = agent["resource"]["process.pid"]
    made_there = [span for span in spans if span["resource"]["process.pid"] == child_pid]
    assert len(made_there) <= MAX_SPANS
    for span in made_there:  # each under its agent span, whatever parent it claimed
        assert agent["id"] in _path_up(span, by_id)
        assert len(span["name"]) <= 128
        assert len(span["attributes"]) <= 16 + 8  # its 16 and, on its agent span, the parent's
        for key, value in span["attributes"].items():
            assert len(key) <= 64 and (not isinstance(value, str) or len(value) <= 256)
        assert root["start"] <= span["start"] <= span["end"] <= root["end"]
    assert received.named("escapes")[0]["attributes"]["n"] == (1 << 63) - 1  # as OTLP carries


def _path_up(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[str]:
    """``span``'s id and its ancestors' up to the run's (a parent not in the trace fails)."""
    path = [span["id"]]
    while span["parent"]:
        span = by_id[span["parent"]]
        assert span["id"] not in path, "a cycle"
        path.append(span["id"])
    return path


def test_a_collector_that_is_not_there_is_one_warning_and_the_run_still_answers(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    port = closed_port()
    api_server.handler = lambda req: text_reply("the answer")
    env = telemetry_env(api_server, tmp_path, f"http://127.0.0.1:{port}")
    done = run_cli(["task", "--agent", "Explore", "hi", "-C", str(workspace)], env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the answer\n"
    said = [line for line in done.stderr.splitlines() if "telemetry" in line]
    assert len(said) == 1 and said[0].startswith("isoagent: warning: telemetry is not exported")
    assert "Connection refused" in said[0]


def closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        return int(closed.getsockname()[1])


def sdk_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("Otel") and t.is_alive()}


def test_a_complaint_logged_by_another_exports_thread_is_not_this_exports(
    receiver: tuple[str, Received],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The SDK's loggers are the process's: a warning from another session's exporter (one
    still retrying, or the Python API's next session) neither warns for this export nor
    makes its end stop waiting for its spans."""
    endpoint, received = receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    export = OtelExport({"CLAUDE_CODE_ENABLE_TELEMETRY": "1"}, trace_id=7)
    export.span(Span(1, 0, "invoke_agent parent", 1, 2))
    elsewhere = logging.getLogger("opentelemetry.exporter.otlp.common.http").warning
    other = threading.Thread(target=elsewhere, args=("Transient error from another export",))
    other.start()
    other.join()
    export.close()

    assert "telemetry" not in capsys.readouterr().err
    assert [span["name"] for span in received.spans] == ["invoke_agent parent"]


def test_an_export_whose_collector_is_not_there_leaves_nothing_retrying(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "120")  # a retry's own deadline
    before = sdk_threads()
    export = OtelExport({"CLAUDE_CODE_ENABLE_TELEMETRY": "1"}, trace_id=7)
    export.span(Span(1, 0, "invoke_agent parent", 1, 2))
    export.close()

    (said,) = capsys.readouterr().err.splitlines()
    assert said.startswith("isoagent: warning: telemetry is not exported")
    left = sdk_threads() - before
    for thread in left:  # stopping: they wake from the retry's wait, long before its deadline
        thread.join(timeout=10)  # unstopped, its retries take about 30 s
        assert not thread.is_alive(), thread.name
    assert not any("Transient" in line for line in capsys.readouterr().err.splitlines())


def test_a_batch_is_one_trace_and_each_line_names_it(
    api_server: MessagesServer,
    tmp_path: Path,
    workspace: Path,
    receiver: tuple[str, Received],
) -> None:
    endpoint, received = receiver
    api_server.handler = lambda req: text_reply(f"answer to {req.first_user_text}")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": n, "prompt": f"task {n}"}) + "\n" for n in (1, 2)))
    env = telemetry_env(api_server, tmp_path, endpoint)
    args = ["batch", str(tasks), "-j", "2", "-C", str(workspace), "-o", str(tmp_path / "out")]
    done = run_cli(args, env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (trace,) = {span["trace"] for span in received.spans}
    assert [line["trace_id"] for line in read_jsonl(tmp_path / "out")] == [trace, trace]
    (root,) = [span for span in received.spans if not span["parent"]]
    agents = received.named("invoke_agent ")
    assert len(agents) == 2 and all(agent["parent"] == root["id"] for agent in agents)
    assert len({agent["resource"]["process.pid"] for agent in agents}) == 2


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, False),
        ({"CLAUDE_CODE_ENABLE_TELEMETRY": "1"}, True),
        ({"CLAUDE_CODE_ENABLE_TELEMETRY": "0"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_METRICS_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_telemetry_is_on_as_claude_code_and_the_otel_sdks_say(
    env: dict[str, str], on: bool
) -> None:
    assert telemetry_enabled(env) is on
