"""Model turns from the Anthropic Messages API, through the official SDK.

The SDK is imported here only, and only when a run needs a model: it costs
about a second and 75 MB, which ``--help``, ``agents`` and replays never pay.
Credentials and the server come from the SDK's own environment variables
(``ANTHROPIC_API_KEY`` or ``ANTHROPIC_AUTH_TOKEN``, ``ANTHROPIC_BASE_URL``).
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from isoagent.protocol import (
    Block,
    ModelCall,
    ModelError,
    ModelReply,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)

KEY_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")


class MissingCredentials(Exception):
    """No key and no server to ask, or a server address that cannot be used."""


def check_credentials(environ: os._Environ[str] | dict[str, str] = os.environ) -> None:
    if not any(environ.get(name) for name in (*KEY_VARIABLES, "ANTHROPIC_BASE_URL")):
        raise MissingCredentials(
            "no API key: set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL to use a local "
            "Anthropic-compatible server), or try `isoagent demo`"
        )


class AnthropicSource:
    def __init__(self, *, max_retries: int = 3, timeout: float = 600.0) -> None:
        check_credentials()
        import anthropic

        self._anthropic = anthropic
        key = None if any(os.environ.get(n) for n in KEY_VARIABLES) else "no-key"
        try:
            self.client = anthropic.AsyncAnthropic(
                api_key=key, max_retries=max_retries, timeout=timeout
            )
        except Exception as exc:  # the SDK's URL parser raises its own error types
            url = os.environ.get("ANTHROPIC_BASE_URL", "")
            raise MissingCredentials(f"invalid ANTHROPIC_BASE_URL {url!r}: {exc}") from None

    async def complete(self, call: ModelCall) -> ModelReply:
        kwargs: dict[str, Any] = {
            "model": call.model,
            "max_tokens": call.max_tokens,
            "messages": msgspec.to_builtins(call.messages),
        }
        if call.system:
            kwargs["system"] = call.system
        if call.tools:
            kwargs["tools"] = msgspec.to_builtins(call.tools)
        try:
            # the raw body, decoded by msgspec into our own Structs: no pydantic models
            response = await self.client.messages.with_raw_response.create(**kwargs)
            return _reply(call.turn, await response.read())
        except self._anthropic.APIError as exc:
            return ModelReply(turn=call.turn, error=self._describe(exc))
        except msgspec.DecodeError as exc:  # a proxy that answers 200 with something else
            error = ModelError("api", f"the server's answer is not a Messages API message: {exc}")
            return ModelReply(turn=call.turn, error=error)

    def _describe(self, exc: Exception) -> ModelError:
        anthropic = self._anthropic
        url = str(self.client.base_url).rstrip("/")
        if isinstance(exc, anthropic.AuthenticationError | anthropic.PermissionDeniedError):
            return ModelError(
                "auth",
                f"{url} rejected the credentials ({exc.status_code}: {_api_message(exc)}); "
                "check ANTHROPIC_API_KEY",
                exc.status_code,
            )
        if isinstance(exc, anthropic.APIConnectionError):
            return ModelError("connection", f"cannot reach {url}: {exc.__cause__ or exc}")
        if isinstance(exc, anthropic.BadRequestError | anthropic.NotFoundError):
            return ModelError(
                "bad_request", f"{exc.status_code}: {_api_message(exc)}", exc.status_code
            )
        if isinstance(exc, anthropic.APIStatusError):
            return ModelError("api", f"{exc.status_code}: {_api_message(exc)}", exc.status_code)
        return ModelError("api", str(exc))


class _Message(msgspec.Struct):
    """What we read of a Messages API response; the other fields are ignored."""

    content: list[dict[str, Any]]
    usage: Usage
    stop_reason: str | None = None


_message_decoder = msgspec.json.Decoder(_Message)
_BLOCK_TYPES: dict[str, type[Block]] = {
    "text": TextBlock,
    "tool_use": ToolUseBlock,
    "thinking": ThinkingBlock,  # kept: the API wants them back with the tool results
    "redacted_thinking": RedactedThinkingBlock,
}


def _reply(turn: int, body: bytes) -> ModelReply:
    """Text, tool-use and thinking blocks as our Structs; block types of features we do not
    ask for (server tools, say) are dropped."""
    message = _message_decoder.decode(body)
    content = [
        msgspec.convert(block, _BLOCK_TYPES[block["type"]])
        for block in message.content
        if block.get("type") in _BLOCK_TYPES
    ]
    return ModelReply(turn, content, message.stop_reason or "", message.usage)


def _api_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return f"{error.get('type', 'error')}: {error['message']}"
    return str(getattr(exc, "message", exc))
