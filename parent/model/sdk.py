"""Model turns from the Anthropic Messages API, through the official SDK.

The SDK is imported here only, and only when a run needs a model: it costs
about a second and 75 MB, which ``--help``, ``agents`` and replays never pay.
Credentials and the server come from the SDK's own environment variables
(``ANTHROPIC_API_KEY`` or ``ANTHROPIC_AUTH_TOKEN``, ``ANTHROPIC_BASE_URL``).

Every request carries prompt-caching breakpoints where Claude Code puts them,
so each turn of a conversation reads the turns before it from the cache.
"""

from __future__ import annotations

import email.utils
import gc
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from isoagent.parent.model.stream import (
    BLOCK_TYPES,
    Assembly,
    EventSplitter,
    SentUsage,
    decode,
    listener,
    one_line,
)
from isoagent.protocol import CallOptions, ModelCall, ModelError, ModelReply

KEY_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")


class MissingCredentials(Exception):
    """No key and no server to ask, or a server address that cannot be used."""


def check_credentials(environ: os._Environ[str] | dict[str, str] = os.environ) -> None:
    if not any(environ.get(name) for name in (*KEY_VARIABLES, "ANTHROPIC_BASE_URL")):
        raise MissingCredentials(
            "no API key: set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL to use a local "
            "Anthropic-compatible server), or try `isoagent demo`"
        )


def _import_sdk() -> Any:
    """``import anthropic`` with the cyclic GC off: the import makes hundreds of thousands
    of objects that live as long as the process, and collecting while they are made is a
    fifth of the import's CPU. They are then frozen, so no later collection walks them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        import anthropic
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
    return anthropic


ResponseHook = Callable[[int, Mapping[str, str]], None]


class AnthropicSource:
    """One attempt per call: a refusal or a failure comes back as the reply's error, and
    the gateway's retry loop (``retry.py``) decides what is tried again, so the SDK's own
    retries are off."""

    def __init__(self, *, max_retries: int = 0, timeout: float = 600.0) -> None:
        check_credentials()
        anthropic = _import_sdk()

        self._anthropic = anthropic
        import httpx2  # the SDK's HTTP library, imported by it already: its raw responses

        self._response_type = httpx2.Response
        self.api_error: type[Exception] = anthropic.APIError  # what the SDK's calls raise
        self._cut = httpx2.TransportError  # a connection lost while the answer streams
        # called with the status and headers of every HTTP response, success or error,
        # before ``complete`` returns: the rate limiter learns the limits from them
        self.on_response: ResponseHook | None = None
        key = None if any(os.environ.get(n) for n in KEY_VARIABLES) else "no-key"
        try:
            self.client = anthropic.AsyncAnthropic(
                api_key=key,
                max_retries=max_retries,
                timeout=timeout,
                base_url=server_root(os.environ.get("ANTHROPIC_BASE_URL")),
                # the SDK's aiohttp transport (its ``aiohttp`` extra): a request costs less
                # than half the CPU of its default httpx2 one, which parses HTTP in Python
                # and probes every idle connection of its pool for each request
                http_client=anthropic.DefaultAioHttpClient(),
            )
        except Exception as exc:  # the SDK's URL parser raises its own error types
            url = os.environ.get("ANTHROPIC_BASE_URL", "")
            raise MissingCredentials(f"invalid ANTHROPIC_BASE_URL {url!r}: {exc}") from None

    async def complete(self, call: ModelCall) -> ModelReply:
        betas = call_betas(call)
        try:
            # The SDK's generic POST with the body encoded by msgspec, and the raw streamed
            # answer decoded by msgspec into our own Structs (``stream.py``): the SDK's
            # headers and errors, without its deep copy of every request or pydantic models
            # of every event.
            response = await self.client.post(
                "/v1/messages",
                cast_to=self._response_type,
                content=_encoder.encode(request_body(call)),
                options={"headers": {"anthropic-beta": ",".join(betas)}} if betas else {},
                stream=True,
                stream_cls=None,
            )
        except self._anthropic.APIError as exc:
            response = getattr(exc, "response", None)
            if self.on_response is not None and response is not None:
                self.on_response(response.status_code, response.headers)
            return ModelReply(turn=call.turn, error=self.describe(exc))
        if self.on_response is not None:
            self.on_response(response.status_code, response.headers)
        assembly = Assembly(call.turn)
        try:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                return message_reply(
                    call.turn, await response.aread()
                )  # a server that won't stream
            return await _read(response, assembly)
        except self._cut as exc:
            url = str(self.client.base_url).rstrip("/")
            said = f"the answer from {url} was cut after {assembly.events} events: "
            cause = " ".join(_first_cause(exc).split())  # aiohttp's spans lines
            return ModelReply(call.turn, error=ModelError("connection", said + cause))
        except msgspec.DecodeError as exc:  # a proxy that answers 200 with something else
            error = ModelError("api", f"the server's answer is not a Messages API message: {exc}")
            return ModelReply(turn=call.turn, error=error)
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self.client.close()

    def describe(self, exc: Exception) -> ModelError:
        """The ``ModelError`` an exception of the SDK's calls stands for."""
        anthropic = self._anthropic
        url = str(self.client.base_url).rstrip("/")
        if isinstance(exc, anthropic.APIStatusError) and (
            isinstance(exc, anthropic.AuthenticationError | anthropic.PermissionDeniedError)
            or _says_auth(exc)
        ):
            return ModelError(
                "auth",
                f"{url} rejected the credentials ({exc.status_code}: {_api_message(exc)}); "
                "check ANTHROPIC_API_KEY",
                exc.status_code,
            )
        if isinstance(exc, anthropic.APIConnectionError):
            return ModelError("connection", f"cannot reach {url}: {_first_cause(exc)}")
        if isinstance(exc, anthropic.BadRequestError | anthropic.NotFoundError):
            return ModelError(
                "bad_request", f"{exc.status_code}: {_api_message(exc)}", exc.status_code
            )
        if isinstance(exc, anthropic.APIStatusError):
            status = exc.status_code
            kind = _RETRIED_STATUSES.get(status, "api")
            if exc.response.headers.get("x-should-retry") == "false":  # the server knows
                kind = "api"
            wait = retry_after(exc.response.headers) if kind != "api" else 0.0
            return ModelError(kind, f"{status}: {_api_message(exc)}", status, wait)
        return ModelError("api", str(exc))


# the statuses the gateway retries, by what they say: the rest (400, 401, 403, 404, 413, ...)
# would be answered the same again
_RETRIED_STATUSES: dict[int, Any] = {
    429: "rate_limit",
    529: "overloaded",
    500: "server",
    502: "server",
    503: "server",
    504: "server",
}


def retry_after(headers: Mapping[str, str]) -> float:
    """Seconds the server asks us to wait: ``retry-after-ms``, or ``retry-after`` in seconds
    or as an HTTP date; 0 when it says nothing usable."""
    try:
        return max(float(headers["retry-after-ms"]) / 1000, 0.0)
    except (KeyError, ValueError):
        pass
    value = headers.get("retry-after", "")
    try:
        return max(float(value), 0.0)
    except ValueError:
        when = email.utils.parsedate_tz(value)
        return max(email.utils.mktime_tz(when) - time.time(), 0.0) if when else 0.0


EPHEMERAL = {"type": "ephemeral"}
# the API refuses a breakpoint on these, and on empty text
_NOT_CACHEABLE = frozenset({"thinking", "redacted_thinking"})


def request_body(call: ModelCall) -> dict[str, Any]:
    """The Messages API request for ``call``, with cache breakpoints (``cache_control``) on
    the last tool, the system prompt and the newest message's last block: 3 of the 4 a
    request may have. The prefix up to each is written to the cache on this turn and read
    from it on the next, whose prefix is this turn's plus the reply and the tool results."""
    messages = msgspec.to_builtins(call.messages)
    for block in reversed(messages[-1]["content"] if messages else []):
        if block.get("type") not in _NOT_CACHEABLE and block.get("text") != "":
            block["cache_control"] = EPHEMERAL
            break
    body: dict[str, Any] = {"model": call.model, "max_tokens": call.max_tokens, "stream": True}
    if call.tools:
        tools = msgspec.to_builtins(call.tools)
        tools[-1]["cache_control"] = EPHEMERAL
        body["tools"] = tools
    if call.system:
        body["system"] = [{"type": "text", "text": call.system, "cache_control": EPHEMERAL}]
    body["messages"] = messages
    if call.options is not None:
        body.update(_option_fields(call.options, call.model, call.max_tokens))
    return body


def _option_fields(options: CallOptions, model: str, max_tokens: int) -> dict[str, Any]:
    """The request fields of the parent's ``CallOptions``, as Claude Code sends them."""
    fields: dict[str, Any] = {}
    kind = default_thinking(model) if options.thinking == "auto" else options.thinking
    if kind:
        thinking: dict[str, Any] = {"type": kind}
        if kind == "enabled":  # "auto"'s budget: MAX_THINKING_TOKENS, else all it may
            budget = options.thinking_budget or max_tokens - 1
            thinking["budget_tokens"] = min(budget, max_tokens - 1)
        if options.thinking_display:
            thinking["display"] = options.thinking_display
        fields["thinking"] = thinking
    output: dict[str, Any] = {}
    if options.effort:
        output["effort"] = options.effort
    if options.task_budget:
        output["task_budget"] = {"type": "tokens", "total": options.task_budget}
    if output:
        fields["output_config"] = output
    return fields


def default_thinking(model: str) -> str:
    """How Claude Code's model calls think when nobody says: adaptively from Claude 4.6
    on, with a budget on Claude 3.7 to 4.5, not at all before; "" too for a model that is
    not Claude's (a local server's, which may know no thinking), where Claude Code would
    send adaptive thinking."""
    numbers = [int(part) for part in model.split("-")[1:] if part.isdigit() and len(part) < 3]
    if not model.startswith("claude-") or not numbers:
        return ""
    version = (numbers[0], numbers[1] if len(numbers) > 1 else 0)
    if version >= (4, 6):
        return "adaptive"
    return "enabled" if version >= (3, 7) else ""


def call_betas(call: ModelCall) -> tuple[str, ...]:
    """The ``anthropic-beta`` values of ``call``: its own, and those its fields need."""
    if call.options is None:
        return ()
    needed = ("task-budgets-2026-03-13",) if call.options.task_budget else ()
    return (*call.options.betas, *needed)


class _Message(msgspec.Struct):
    """What we read of a Messages API response; the other fields are ignored."""

    content: list[dict[str, Any]]
    usage: SentUsage
    stop_reason: str | None = None
    id: str = ""


_encoder = msgspec.json.Encoder()
_message_decoder = msgspec.json.Decoder(_Message)


async def _read(response: Any, assembly: Assembly) -> ModelReply:
    """The streamed message, once whole; an error if it broke off or ended before that."""
    splitter = EventSplitter()
    hear = listener.get()
    async for chunk in response.aiter_bytes():
        for data in splitter.feed(chunk):
            event = decode(data)  # what is not JSON raises here: none of it is heard
            if hear is not None:
                hear(one_line(data))
            assembly.add(event)
            if assembly.error is not None:
                return ModelReply(assembly.turn, error=assembly.error)
    if not assembly.whole:
        said = f"the answer ended after {assembly.events} events, before its end"
        return ModelReply(assembly.turn, error=ModelError("connection", said))
    return assembly.reply()


def message_reply(turn: int, body: bytes) -> ModelReply:
    """A whole message, from a server that answers a streamed request without streaming:
    text, tool-use, thinking and web-search blocks as our Structs; block types of features
    we do not ask for are dropped."""
    message = _message_decoder.decode(body)
    content = [
        msgspec.convert(block, BLOCK_TYPES[block["type"]])
        for block in message.content
        if block.get("type") in BLOCK_TYPES
    ]
    return ModelReply(
        turn, content, message.stop_reason or "", message.usage.counts(), id=message.id
    )


def _first_cause(exc: BaseException) -> str:
    """What began a chain of exceptions, in the OS's own words ("[Errno 111] Connect call
    failed") rather than the wrappers' around them; the innermost that says anything (a
    timeout's often says nothing)."""
    said = str(exc) or type(exc).__name__
    cause = exc.__cause__
    while cause is not None:
        said = str(cause) or said
        cause = cause.__cause__
    return said


def server_root(url: str | None) -> str | None:
    """``ANTHROPIC_BASE_URL`` without a trailing ``/v1``, which proxies' documentation
    often includes and the SDK adds itself (None: the SDK's default)."""
    if not url:
        return None
    root = url.rstrip("/")
    return root.removesuffix("/v1") if root.endswith("/v1") else url


_AUTH_TYPES = frozenset(
    {"authentication_error", "permission_error", "auth_error", "invalid_api_key"}
)
_AUTH_WORDS = re.compile(
    r"authenticat|unauthori[sz]ed|invalid (?:api |proxy server |x-api-)?(?:key|token)"
    r"|api key not (?:valid|found)",
    re.IGNORECASE,
)


def _says_auth(exc: Any) -> bool:
    """A 4xx whose body says the credentials were refused: proxies such as LiteLLM answer
    a wrong key with 400 and an ``auth_error`` (or a 401 code in the body)."""
    status = getattr(exc, "status_code", 0)
    body = getattr(exc, "body", None)
    if not 400 <= status < 500 or not isinstance(body, dict):
        return False
    error = body.get("error")
    if not isinstance(error, dict):
        return bool(_AUTH_WORDS.search(str(error or body.get("message") or "")))
    return (
        error.get("type") in _AUTH_TYPES
        or str(error.get("code")) in ("401", "403")
        or bool(_AUTH_WORDS.search(str(error.get("message") or "")))
    )


def _api_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return f"{error.get('type', 'error')}: {error['message']}"
    return str(getattr(exc, "message", exc))
