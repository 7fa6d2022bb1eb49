"""Claude Code's TodoWrite, WebFetch and WebSearch (the API's own ``web_search``, by the name
the API gives it)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from isoagent.child.agent.tools import make_tools
from isoagent.child.agent.tools.base import ToolContext
from isoagent.parent.claude_code.agent_files import parse_agent_file
from isoagent.protocol import SandboxPolicy
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request

PAGE = b"""<html><head><title>t</title><style>p {color: red}</style></head>
<body><script>var secret = 1;</script><h1>Release notes</h1><p>Version 2 &amp; more.</p>
<ul><li>fast</li><li>small</li></ul></body></html>"""


class _Pages(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/redirect?to="):  # an open redirect, as many sites have
            self.send_response(302)
            self.send_header("location", self.path.removeprefix("/redirect?to="))
            self.send_header("content-length", "0")
            self.end_headers()
            return
        status, body = (200, PAGE) if self.path == "/notes" else (404, b"missing")
        self.send_response(status)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def tool(  # type: ignore[no-untyped-def]
    name: str, tmp_path: Path, *, network: bool = True, local: tuple[str, ...] = ("127.0.0.1",)
):
    """``name`` with a network, the test site's host allowed though it is local."""
    policy = SandboxPolicy(network=network, local_fetch_hosts=local)
    [made] = make_tools([name], ToolContext(tmp_path, sandbox=policy))
    return made


def test_web_fetch_returns_the_pages_text_without_scripts_or_styles(
    site: str, tmp_path: Path
) -> None:
    out = tool("WebFetch", tmp_path).run({"url": f"{site}/notes", "prompt": "what changed?"})
    assert not out.is_error, out.text
    assert "Release notes\nVersion 2 & more.\nfast\nsmall" in out.text
    assert "secret" not in out.text and "color" not in out.text


def test_web_fetch_reads_on_from_an_offset_and_wants_a_prompt(site: str, tmp_path: Path) -> None:
    """Claude Code's WebFetch input: ``prompt`` required, ``offset`` a character of the text."""
    fetch = tool("WebFetch", tmp_path)
    whole = fetch.run({"url": f"{site}/notes", "prompt": "p"}).text
    text = whole.split("\n\n", 1)[1]
    later = fetch.run({"url": f"{site}/notes", "prompt": "p", "offset": 8}).text
    assert later.endswith(text[8:]) and f"from character 8 of {len(text)}" in later
    assert fetch.run({"url": f"{site}/notes"}).is_error  # no prompt: as Claude Code refuses


def test_web_fetch_errors_are_tool_errors(site: str, tmp_path: Path) -> None:
    missing = tool("WebFetch", tmp_path).run({"url": f"{site}/gone", "prompt": "p"})
    assert missing.is_error and "HTTP 404" in missing.text
    local = tool("WebFetch", tmp_path).run({"url": "file:///etc/passwd", "prompt": "p"})
    assert local.is_error and "only http:// and https://" in local.text


def test_web_fetch_refuses_a_local_address_unless_allowed(site: str, tmp_path: Path) -> None:
    out = tool("WebFetch", tmp_path, local=()).run({"url": f"{site}/notes", "prompt": "p"})
    assert out.is_error and "127.0.0.1 is at 127.0.0.1, not a public address" in out.text
    assert "Release notes" not in out.text


def test_web_fetch_checks_each_redirect_as_the_first_url(site: str, tmp_path: Path) -> None:
    """An allowed host's open redirect to another local name is refused, not followed."""
    target = f"http://localhost:{site.rsplit(':', 1)[1]}/notes"
    out = tool("WebFetch", tmp_path).run({"url": f"{site}/redirect?to={target}", "prompt": "p"})
    assert out.is_error and "localhost is at 127.0.0.1, not a public address" in out.text
    assert "Release notes" not in out.text


def test_web_fetch_in_a_child_without_network_is_refused_clearly(site: str, tmp_path: Path) -> None:
    out = tool("WebFetch", tmp_path, network=False).run({"url": f"{site}/notes", "prompt": "p"})
    assert out.is_error and "runs without network (--child-network off)" in out.text


def test_todo_write_keeps_the_agents_own_list(tmp_path: Path) -> None:
    todo = tool("TodoWrite", tmp_path)
    out = todo.run(
        {
            "todos": [
                {"content": "read code", "status": "completed", "activeForm": "Reading"},
                {"content": "fix bug", "status": "in_progress", "activeForm": "Fixing"},
            ]
        }
    )
    assert out.text == "Task list updated:\n[x] read code\n[~] fix bug"
    bad = todo.run({"todos": [{"content": "x", "status": "done"}]})
    assert bad.is_error and "status" in bad.text


def test_agent_files_naming_todo_write_and_web_fetch_get_them(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_text("---\nname: a\ndescription: d\ntools: Read, TodoWrite, WebFetch\n---\nx\n")
    spec, missing = parse_agent_file(path)
    assert spec.tools == ["Read", "TodoWrite", "WebFetch"] and missing == []


SEARCH_ANSWER = [
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
    {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [{"type": "web_search_result", "url": "https://e.org", "title": "E"}],
    },
    {"type": "text", "text": "found it"},
]


def test_web_search_is_the_apis_own_tool_offered_through_the_gateway(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """An agent file's WebSearch: the child offers the API's server-side web search (the
    child needs no network), and a paused turn goes back to the API unchanged."""
    workspace = tmp_path / "ws"
    (workspace / ".claude" / "agents").mkdir(parents=True)
    (workspace / ".claude" / "agents" / "s.md").write_text(
        "---\nname: searcher\ndescription: d\ntools: Read, WebSearch\n---\nSearch.\n"
    )

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return Reply(content=SEARCH_ANSWER[:2], stop_reason="pause_turn")
        return Reply(content=SEARCH_ANSWER[2:])

    api_server.handler = handler
    done = run_cli(
        ["task", "--agent", "searcher", "look it up", "--child-network", "off"],
        cli_env(api_server, HOME=str(tmp_path / "home")),
        cwd=workspace,
        input="",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "found it\n"
    first, second = api_server.requests
    assert first.body["tools"][-1] == {
        "name": "web_search",
        "type": "web_search_20250305",
        "max_uses": 5,
        "cache_control": {"type": "ephemeral"},
    }
    paused = second.messages[-1]
    assert paused["role"] == "assistant"
    assert [b["type"] for b in paused["content"]] == ["server_tool_use", "web_search_tool_result"]
    assert paused["content"][1]["content"] == SEARCH_ANSWER[1]["content"]
