"""An in-test Anthropic Messages API server on 127.0.0.1 (stdlib only).

Usage::

    with MessagesServer(lambda req: text_reply("hi")) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="test-key")
        ...
        assert server.requests[0].first_user_text == "hello"

The handler gets a `Request` and returns a `Reply` (built with `text_reply`,
`tool_reply`, `tools_reply` or `error_reply`) or a list of Replies. With a list,
the n-th request sharing the same ``(is_parent, first_user_text, turn)`` key gets
``replies[n]`` (the last one repeats once the list is used up) -- this is how a
test scripts "529, then 200": ``lambda r: [error_reply(529, ...), text_reply("ok")]``.
Replacing ``server.handler`` resets those per-key counters.

A request with ``"stream": true`` is answered with the API's SSE events; a Reply's
``cut_after=N`` closes the connection after N of them, ``fail_after=N`` sends an ``error``
event (overloaded_error) after N and ends the stream, and ``streams=False`` answers one
JSON message anyway, as some proxies do; ``sse=b"..."`` sends that event stream as it is;
``pace=S`` sends each event S seconds after the one before (a client that hangs up ends it).

429/408/409/5xx error replies carry ``retry-after-ms: 1`` (the anthropic SDK reads
``retry-after-ms`` first and ignores a zero ``retry-after``), so SDK retries are
near-instant. A handler exception becomes a 500 with ``x-should-retry: false``
(the SDK raises at once, no retries) and is recorded in ``server.handler_errors``.

The server is a ``ThreadingHTTPServer`` (one daemon thread per connection, HTTP/1.1
keep-alive, TCP_NODELAY), so a reply's ``delay`` sleeps only its own thread.

It also speaks the Message Batches API as documented: ``POST /v1/messages/batches``
(``requests``: ``[{custom_id, params}]``), ``GET /v1/messages/batches/{id}`` (processing
status, request counts, ``results_url`` once ended), ``GET .../results`` (JSONL, in no
particular order), ``POST .../cancel`` and ``GET /v1/messages/batches`` (the list). A batch
ends ``server.batch_delay`` seconds after it was created; its requests are then answered by
the same handler as ``/v1/messages`` (each is recorded in ``server.requests`` too, with its
``custom_id``). A Reply with ``batch_result="expired"`` or ``"canceled"`` is that result; an
error Reply is an ``errored`` result; a Reply's ``delay`` is not slept. Each created batch is
kept in ``server.batches``.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import re
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

__all__ = [
    "MessageBatch",
    "MessagesServer",
    "Reply",
    "Request",
    "error_reply",
    "text_reply",
    "tool_reply",
    "tools_reply",
    "unused_url",
]

MESSAGES_PATH = "/v1/messages"
BATCHES_PATH = "/v1/messages/batches"
BATCH_LIMIT = 100_000  # requests in one Message Batch
BATCH_BYTES = 256 * 1024 * 1024
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_RETRIED_STATUSES = frozenset({408, 409, 429})


def _blocks_text(content: Any) -> str:
    """Text of a message `content` (a str or a list of blocks), text blocks only."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


@dataclass
class Request:
    """One POST /v1/messages as received, or one request of a Message Batch."""

    body: dict[str, Any]
    headers: dict[str, str]
    custom_id: str = ""  # a batched request's; "" for POST /v1/messages
    pace: float = 0.0  # its reply's, once the handler answered

    @property
    def system(self) -> str:
        """`system` flattened to text ("" when absent)."""
        return _blocks_text(self.body.get("system", ""))

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's `messages` list."""
        return list(self.body.get("messages") or [])

    @property
    def model(self) -> str:
        """The requested model name."""
        return str(self.body.get("model", ""))

    @property
    def api_key(self) -> str:
        """The key sent, from ``x-api-key`` or ``authorization: Bearer`` ("" if none)."""
        if key := self.headers.get("x-api-key"):
            return key
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        return token if scheme.lower() == "bearer" else ""

    @property
    def stream(self) -> bool:
        """Whether the request asked for SSE streaming."""
        return bool(self.body.get("stream"))

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools offered in the request."""
        return [t.get("name", "") for t in self.body.get("tools") or [] if isinstance(t, dict)]

    @property
    def is_parent(self) -> bool:
        """True when the `Agent` tool is offered (the parent agent's call)."""
        return "Agent" in self.tool_names

    @property
    def turn(self) -> int:
        """Number of assistant messages so far."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def first_user_text(self) -> str:
        """Text of the first user message ("" if none)."""
        for m in self.messages:
            if m.get("role") == "user":
                return _blocks_text(m.get("content"))
        return ""

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """The tool_result blocks of the last user message."""
        for m in reversed(self.messages):
            if m.get("role") == "user":
                content = m.get("content")
                if not isinstance(content, list):
                    return []
                return [
                    b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
                ]
        return []

    def text(self) -> str:
        """All text in `messages`: text blocks, tool_use inputs (as JSON), tool_result contents."""
        parts: list[str] = []
        for m in self.messages:
            content = m.get("content")
            if isinstance(content, str):
                parts.append(content)
                continue
            for b in content or []:
                if not isinstance(b, dict):
                    continue
                kind = b.get("type")
                if kind == "text":
                    parts.append(b.get("text", ""))
                elif kind == "tool_use":
                    parts.append(json.dumps(b.get("input"), ensure_ascii=False))
                elif kind == "tool_result":
                    parts.append(_blocks_text(b.get("content", "")))
        return "\n".join(parts)


@dataclass
class Reply:
    """What the server answers: a Message (status 200) or an error."""

    content: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = "end_turn"
    usage: tuple[int, int] = (10, 5)
    cache: tuple[int, int] = (0, 0)  # prompt-cache tokens (written, read), as the API counts them
    status: int = 200
    error_type: str = ""
    error_message: str = ""
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    # a streamed answer's breaks: the connection closed after this many events, or an
    # ``error`` event (overloaded_error) sent after this many and the stream ended
    cut_after: int | None = None
    fail_after: int | None = None
    streams: bool = True  # False: a whole JSON message even when asked to stream
    pace: float = 0.0  # seconds before each event of a streamed answer (a slow model)
    sse: bytes = b""  # an event stream sent as it is, in place of the message's events
    # in a Message Batch, this request's result is expired or canceled instead
    batch_result: Literal["", "expired", "canceled"] = ""

    @property
    def is_error(self) -> bool:
        """True for a non-2xx reply."""
        return self.status >= 300


def text_reply(text: str, *, usage: tuple[int, int] = (10, 5), delay: float = 0.0) -> Reply:
    """A final answer: one text block, stop_reason "end_turn"."""
    return Reply(content=[{"type": "text", "text": text}], usage=usage, delay=delay)


def tools_reply(
    calls: Sequence[tuple[str, dict[str, Any]]],
    *,
    text: str | None = None,
    usage: tuple[int, int] = (10, 5),
    delay: float = 0.0,
) -> Reply:
    """Several tool_use blocks in one turn (after optional text); stop_reason "tool_use".

    Tool-use ids are filled in uniquely ("toolu_...") when the reply is sent.
    """
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    content.extend(
        {"type": "tool_use", "id": None, "name": name, "input": dict(inp)} for name, inp in calls
    )
    return Reply(content=content, stop_reason="tool_use", usage=usage, delay=delay)


def tool_reply(
    name: str,
    input: dict[str, Any],
    *,
    id: str | None = None,
    text: str | None = None,
    usage: tuple[int, int] = (10, 5),
    delay: float = 0.0,
) -> Reply:
    """One tool_use block (after optional text); stop_reason "tool_use"."""
    reply = tools_reply([(name, input)], text=text, usage=usage, delay=delay)
    reply.content[-1]["id"] = id
    return reply


def error_reply(
    status: int,
    error_type: str,
    message: str,
    *,
    delay: float = 0.0,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """An API error, e.g. ``error_reply(529, "overloaded_error", "Overloaded")``.

    Statuses the SDK retries (408, 409, 429, 5xx) get ``retry-after-ms: 1`` and
    ``retry-after: 0`` unless `headers` overrides them.
    """
    hdrs: dict[str, str] = {}
    if status in _RETRIED_STATUSES or status >= 500:
        hdrs = {"retry-after-ms": "1", "retry-after": "0"}
    hdrs.update(headers or {})
    return Reply(
        status=status, error_type=error_type, error_message=message, delay=delay, headers=hdrs
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 with (very likely) nothing listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# every server URL this process gave out, of a server it started or of none (`unused_url`):
# a warm daemon still serving one after the session is a daemon the suite (or the bench) left
# running (``tests/support/warm.py``)
OUR_URLS: set[str] = set()


def unused_url() -> str:
    """An http://127.0.0.1:PORT URL with (very likely) nothing listening."""
    url = f"http://127.0.0.1:{free_port()}"
    OUR_URLS.add(url)  # a command pointed at it may start a warm daemon too
    return url


def _error_body(error_type: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": error_type, "message": message}}).encode()


def _chunks(s: str, size: int) -> Iterator[str]:
    """``s`` in pieces of ``size`` characters, or in 256 pieces where that is more: a
    megabytes-long input is not 300,000 events that only cost the client CPU."""
    size = max(size, -(-len(s) // 256))
    for i in range(0, len(s), size):
        yield s[i : i + size]


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _deltas(block: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A block as its ``content_block_start`` has it, and the deltas that complete it."""
    kind = block["type"]
    if kind in ("tool_use", "server_tool_use"):
        text = json.dumps(block["input"], ensure_ascii=False)
        parts = [{"type": "input_json_delta", "partial_json": ""}]
        parts += [{"type": "input_json_delta", "partial_json": p} for p in _chunks(text, 16)]
        return dict(block, input={}), parts
    if kind == "text":
        return dict(block, text=""), [
            {"type": "text_delta", "text": p} for p in _chunks(block["text"], 16)
        ]
    if kind == "thinking":
        parts = [{"type": "thinking_delta", "thinking": p} for p in _chunks(block["thinking"], 16)]
        if "signature" in block:
            parts.append({"type": "signature_delta", "signature": block["signature"]})
        return {"type": "thinking", "thinking": "", "signature": ""}, parts
    return block, []  # whole in its start: redacted thinking, search results, others


def _sse_events(message: dict[str, Any]) -> list[bytes]:
    """The SSE events the real API sends for `message`."""
    start = dict(message, content=[], stop_reason=None, stop_sequence=None)
    start["usage"] = dict(message["usage"], output_tokens=1)
    out = [_sse("message_start", {"type": "message_start", "message": start})]
    out.append(_sse("ping", {"type": "ping"}))
    for index, block in enumerate(message["content"]):
        first, deltas = _deltas(block)
        out.append(
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": first},
            )
        )
        out.extend(
            _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        )
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
            },
        )
    )
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


def _sse_body(message: dict[str, Any], reply: Reply) -> tuple[bytes, int | None]:
    """The streamed answer for `message`, broken off as `reply` says: the body, and how
    many of its bytes are sent before the connection is closed (None: all)."""
    events = _sse_events(message)
    if reply.fail_after is not None:
        failed = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        events = [*events[: reply.fail_after], _sse("error", failed)]
    if reply.cut_after is None:
        return b"".join(events), None
    return b"".join(events), len(b"".join(events[: reply.cut_after]))


Handler = Callable[[Request], Reply | list[Reply]]


def _timestamp(when: float | None) -> str | None:
    """RFC 3339, as the API writes its times."""
    if when is None:
        return None
    return datetime.datetime.fromtimestamp(when, datetime.UTC).isoformat().replace("+00:00", "Z")


@dataclass
class MessageBatch:
    """A Message Batch as the server was sent it, and what became of it."""

    id: str
    requests: list[Request]
    created: float  # time.time()
    ends: float  # when its processing ends
    cancel_initiated: float | None = None
    ended: float | None = None
    results: list[dict[str, Any]] = field(default_factory=list)  # once ended, custom_id + result
    polls: int = 0  # GETs of it

    def as_json(self, base_url: str) -> dict[str, Any]:
        counts = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
        if self.ended is None:  # every request is processing until the whole batch ends
            counts["processing"] = len(self.requests)
        for line in self.results:
            counts[line["result"]["type"]] += 1
        status = "ended" if self.ended else "canceling" if self.cancel_initiated else "in_progress"
        return {
            "id": self.id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": counts,
            "ended_at": _timestamp(self.ended),
            "created_at": _timestamp(self.created),
            "expires_at": _timestamp(self.created + 24 * 3600),
            "archived_at": None,
            "cancel_initiated_at": _timestamp(self.cancel_initiated),
            "results_url": f"{base_url}{BATCHES_PATH}/{self.id}/results" if self.ended else None,
        }


def _default_handler(_request: Request) -> Reply:
    return text_reply("ok")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 512
    owner: MessagesServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-reply is normal (a cancelled call); anything else goes to
        the test's own stderr, never into the stderr of a CLI run in-process beside it."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        traceback.print_exc(file=sys.__stderr__)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging."""

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _send(
        self,
        status: int,
        body: bytes,
        *,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
        sent: int | None = None,
        pace: float = 0.0,
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if pace:
            for event in body.split(b"\n\n")[:-1]:
                time.sleep(pace)
                self.wfile.write(event + b"\n\n")
                self.wfile.flush()
            return
        if sent is None:
            self.wfile.write(body)
            return
        self.wfile.write(body[:sent])  # the rest never comes: the answer is cut
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _not_found(self) -> None:
        self._send(
            HTTPStatus.NOT_FOUND,
            _error_body("not_found_error", f"{self.command} {self.path}: not found"),
        )

    def do_GET(self) -> None:
        """The Message Batches API's GETs (a batch, its results, the list); others are 404s."""
        path = self.path.split("?", 1)[0]
        if not path.startswith(BATCHES_PATH):
            self._not_found()
            return
        status, body, content_type = self.server.owner._batches_get(path)
        self._send(status, body, content_type=content_type)

    def _do_other(self) -> None:
        self._not_found()

    do_PUT = do_DELETE = do_PATCH = do_HEAD = _do_other

    def do_POST(self) -> None:
        """POST /v1/messages and the Message Batches API's POSTs are served; any other
        path is a 404."""
        raw = self._read_body()
        path = self.path.split("?", 1)[0]
        if path != MESSAGES_PATH and not path.startswith(BATCHES_PATH):
            self._not_found()
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as e:
            self._send(400, _error_body("invalid_request_error", f"invalid JSON body: {e}"))
            return
        if path != MESSAGES_PATH:
            self._send(*self.server.owner._batches_post(path, body))
            return
        request = Request(body=body, headers={k.lower(): v for k, v in self.headers.items()})
        status, payload, content_type, headers, sent = self.server.owner._serve(request)
        pace = request.pace if content_type == "text/event-stream" else 0.0
        self._send(
            status, payload, content_type=content_type, headers=headers, sent=sent, pace=pace
        )


class MessagesServer:
    """A local Messages API server; see the module docstring."""

    def __init__(self, handler: Handler | None = None) -> None:
        self._lock = threading.Lock()
        self._handler: Handler = handler or _default_handler
        self._counters: dict[tuple[bool, str, int], int] = {}
        self._events: list[tuple[int, Request]] = []  # (+1 start | -1 end, request)
        self._conns: set[socket.socket] = set()
        self._ids = itertools.count(1)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.requests: list[Request] = []
        self.handler_errors: list[BaseException] = []
        self.retried_replies = 0  # replies a client retries (429, 5xx, cut streams): backoff
        self.base_url = ""
        self.batches: dict[str, MessageBatch] = {}  # the Message Batches created, by id
        self.batch_delay = 0.0  # seconds from a batch's creation to the end of its processing
        self._batch_lock = threading.Lock()  # a batch is processed once

    @property
    def handler(self) -> Handler:
        """The current handler; assigning one resets the reply-list counters."""
        return self._handler

    @handler.setter
    def handler(self, fn: Handler) -> None:
        with self._lock:
            self._handler = fn
            self._counters.clear()

    def reset(self, handler: Handler) -> None:
        """Forget every request and counter and answer with ``handler``: one server serves
        test after test (a test's requests still in flight are the previous test's)."""
        with self._lock:
            self._handler = handler
            self._counters.clear()
            self._events.clear()
            self.requests = []
            self.handler_errors = []
            self.retried_replies = 0
            self.batches = {}
            self.batch_delay = 0.0

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> MessagesServer:
        """Listen on 127.0.0.1 (a free port) and serve in a daemon thread."""
        if self._httpd is not None:
            return self
        httpd = _HTTPServer(("127.0.0.1", 0), _RequestHandler)
        httpd.owner = self
        self._httpd = httpd
        self.base_url = f"http://127.0.0.1:{httpd.server_address[1]}"
        OUR_URLS.add(self.base_url)
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="messages-server",
            daemon=True,
        )
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._httpd is not None

    def stop(self) -> None:
        """Stop serving and drop open connections (idempotent)."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> MessagesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @staticmethod
    def connections_refused_url() -> str:
        """Same as `unused_url()`."""
        return unused_url()

    # -- concurrency stats ---------------------------------------------------

    @property
    def max_in_flight(self) -> int:
        """Highest number of /v1/messages requests handled at once."""
        return self.max_in_flight_where(lambda _r: True)

    def max_in_flight_where(self, pred: Callable[[Request], bool]) -> int:
        """Highest number of concurrently handled requests among those matching `pred`."""
        with self._lock:
            events = list(self._events)
        current = best = 0
        for delta, request in events:
            if pred(request):
                current += delta
                best = max(best, current)
        return best

    # -- internals -----------------------------------------------------------

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def _pick(self, request: Request) -> Reply:
        """Call the handler; resolve a list of replies by the request's key."""
        with self._lock:
            handler = self._handler
        result = handler(request)
        if isinstance(result, Reply):
            return result
        if isinstance(result, list) and result and all(isinstance(r, Reply) for r in result):
            key = (request.is_parent, request.first_user_text, request.turn)
            with self._lock:
                n = self._counters.get(key, 0)
                self._counters[key] = n + 1
            return result[min(n, len(result) - 1)]
        raise TypeError(f"handler returned {result!r}, expected a Reply or a non-empty list")

    def _message(self, request: Request, reply: Reply) -> dict[str, Any]:
        content = []
        for block in reply.content:
            block = dict(block)
            if block.get("type") == "tool_use" and not block.get("id"):
                block["id"] = f"toolu_{next(self._ids):06d}{uuid.uuid4().hex[:18]}"
            content.append(block)
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": request.model or "claude-test",
            "content": content,
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": reply.usage[0],
                "output_tokens": reply.usage[1],
                "cache_creation_input_tokens": reply.cache[0],
                "cache_read_input_tokens": reply.cache[1],
            },
        }

    def _serve(self, request: Request) -> tuple[int, bytes, str, dict[str, str], int | None]:
        """Record `request`, run the handler, render (status, body, content type, headers,
        bytes of the body sent before the connection is cut: None for all)."""
        with self._lock:
            self.requests.append(request)
            self._events.append((1, request))
        status = 500
        try:
            status, body, content_type, headers, sent = self._render(request)
            return status, body, content_type, headers, sent
        finally:
            with self._lock:
                self._events.append((-1, request))
                self.retried_replies += status in _RETRIED_STATUSES or status >= 500

    def _render(self, request: Request) -> tuple[int, bytes, str, dict[str, str], int | None]:
        try:
            reply = self._pick(request)
        except Exception as e:
            with self._lock:
                self.handler_errors.append(e)
            body = _error_body("api_error", f"test handler raised {type(e).__name__}: {e}")
            return 500, body, "application/json", {"x-should-retry": "false"}, None
        if reply.delay > 0:
            time.sleep(reply.delay)
        if reply.is_error:
            body = _error_body(reply.error_type, reply.error_message)
            return reply.status, body, "application/json", dict(reply.headers), None
        message = self._message(request, reply)
        request.pace = reply.pace
        if request.stream and reply.sse:
            return reply.status, reply.sse, "text/event-stream", dict(reply.headers), None
        if request.stream and reply.streams:
            headers = {"cache-control": "no-cache", **reply.headers}
            body, sent = _sse_body(message, reply)
            if reply.cut_after is not None or reply.fail_after is not None:
                with self._lock:  # a broken stream is retried like a 5xx
                    self.retried_replies += 1
            return reply.status, body, "text/event-stream", headers, sent
        body = json.dumps(message, ensure_ascii=False).encode()
        return reply.status, body, "application/json", dict(reply.headers), None

    # -- the Message Batches API ----------------------------------------------

    def _batches_post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        """Create a batch (``POST /v1/messages/batches``) or cancel one (``.../{id}/cancel``)."""
        if path == BATCHES_PATH:
            return self._create_batch(body)
        batch_id, _, action = path.removeprefix(BATCHES_PATH + "/").partition("/")
        batch = self.batches.get(batch_id)
        if batch is None or action != "cancel":
            return 404, _error_body("not_found_error", f"POST {path}: not found")
        with self._batch_lock:
            if batch.ended is None and batch.cancel_initiated is None:
                batch.cancel_initiated = time.time()
        return 200, json.dumps(batch.as_json(self.base_url)).encode()

    def _create_batch(self, body: dict[str, Any]) -> tuple[int, bytes]:
        requests = body.get("requests")
        if not isinstance(requests, list) or not 1 <= len(requests) <= BATCH_LIMIT:
            why = f"requests: a list of 1 to {BATCH_LIMIT:,} requests"
            return 400, _error_body("invalid_request_error", why)
        seen: set[str] = set()
        batched: list[Request] = []
        for number, item in enumerate(requests):
            custom_id = item.get("custom_id") if isinstance(item, dict) else None
            params = item.get("params") if isinstance(item, dict) else None
            if not isinstance(custom_id, str) or not _CUSTOM_ID.match(custom_id):
                why = f"requests.{number}.custom_id: 1 to 64 letters, digits, - or _"
                return 400, _error_body("invalid_request_error", why)
            if custom_id in seen:
                why = f"requests.{number}.custom_id: {custom_id!r} is not unique in the batch"
                return 400, _error_body("invalid_request_error", why)
            if not isinstance(params, dict) or not {"model", "max_tokens", "messages"} <= set(
                params
            ):
                why = f"requests.{number}.params: model, max_tokens and messages are required"
                return 400, _error_body("invalid_request_error", why)
            seen.add(custom_id)
            batched.append(Request(body=params, headers={}, custom_id=custom_id))
        now = time.time()
        batch = MessageBatch(
            f"msgbatch_{uuid.uuid4().hex[:24]}", batched, now, now + self.batch_delay
        )
        with self._batch_lock:
            self.batches[batch.id] = batch
        return 200, json.dumps(batch.as_json(self.base_url)).encode()

    def _batches_get(self, path: str) -> tuple[int, bytes, str]:
        """A batch, its results as JSONL once it has ended, or the list of batches."""
        if path == BATCHES_PATH:
            with self._batch_lock:
                listed = [b.as_json(self.base_url) for b in reversed(self.batches.values())]
            ids = [b["id"] for b in listed]
            page = {"data": listed, "has_more": False, "first_id": ids[0] if ids else None,
                    "last_id": ids[-1] if ids else None}  # fmt: skip
            return 200, json.dumps(page).encode(), "application/json"
        batch_id, _, action = path.removeprefix(BATCHES_PATH + "/").partition("/")
        batch = self.batches.get(batch_id)
        if batch is None or action not in ("", "results"):
            return 404, _error_body("not_found_error", f"GET {path}: not found"), "application/json"
        self._process(batch)
        if action == "":
            batch.polls += 1
            return 200, json.dumps(batch.as_json(self.base_url)).encode(), "application/json"
        if batch.ended is None:
            why = f"{batch.id} has not ended: its results are not ready"
            return 400, _error_body("invalid_request_error", why), "application/json"
        lines = [json.dumps(line, ensure_ascii=False) + "\n" for line in reversed(batch.results)]
        return 200, "".join(lines).encode(), "application/binary"

    def _process(self, batch: MessageBatch) -> None:
        """Once its time has come (or it was cancelled), answer each of the batch's requests."""
        with self._batch_lock:
            now = time.time()
            if batch.ended is not None or (batch.cancel_initiated is None and now < batch.ends):
                return
            for request in batch.requests:
                result = self._batch_result(request, canceled=batch.cancel_initiated is not None)
                batch.results.append({"custom_id": request.custom_id, "result": result})
            batch.ended = now

    def _batch_result(self, request: Request, *, canceled: bool) -> dict[str, Any]:
        if canceled:
            return {"type": "canceled"}
        with self._lock:
            self.requests.append(request)
        try:
            reply = self._pick(request)
        except Exception as e:
            with self._lock:
                self.handler_errors.append(e)
            reply = error_reply(500, "api_error", f"test handler raised {type(e).__name__}: {e}")
        if reply.batch_result:
            return {"type": reply.batch_result}
        if reply.is_error:
            error = {"type": reply.error_type, "message": reply.error_message}
            return {"type": "errored", "error": {"type": "error", "error": error}}
        return {"type": "succeeded", "message": self._message(request, reply)}
