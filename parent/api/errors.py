"""Every way an isoagent run can fail, one class for each a caller would handle differently,
all under ``IsoagentError`` (as the ``anthropic`` SDK's are under ``AnthropicError``).

Each class has the exit code the CLI gives the same failure: ``STATUS_ERRORS`` (how a run
ended, to its class) is the one table both the API and ``exit_codes.STATUS_EXIT`` read.
Ctrl-C is no class of these: it reaches the caller as ``KeyboardInterrupt``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself is not imported: ``isoagent --help`` reads this module
if TYPE_CHECKING:
    from isoagent._calls import Result


class IsoagentError(Exception):
    """An isoagent run failed, or could not start. ``result``: how the run ended, when it
    ran (None: it did not start)."""

    exit_code = 1

    def __init__(self, message: str, result: Result | None = None) -> None:
        super().__init__(message)
        self.result = result


class OptionError(IsoagentError, ValueError, TypeError):
    """A bad option, keyword, prompt or agent type: nothing ran. Also a ``ValueError`` (a
    bad value) and a ``TypeError`` (a keyword that is no option), as Python's own are."""

    exit_code = 2


class APIError(IsoagentError):
    """The model API refused or failed a call (a 400, a 5xx, an overload given up on)."""


class AuthenticationError(APIError):
    """No credentials, or the API rejected them (401, 403)."""


class ModelNotFoundError(APIError):
    """The API has no such model (404)."""


class APIConnectionError(APIError):
    """The API could not be reached (a refused connection, DNS, TLS), until the deadline."""


class RateLimitError(APIError):
    """The API's rate limit (429) held until the retry deadline (``api_retry_deadline``)."""


class TurnLimitError(IsoagentError):
    """An agent stopped at its turn limit (``max_turns``); ``result`` is what it had."""

    exit_code = 3


class ChildCrashedError(IsoagentError):
    """A child process crashed, was killed, broke the protocol or could not be launched."""

    exit_code = 4


class ChildTimeoutError(ChildCrashedError):
    """A child ran past its wall-clock ``timeout`` and was ended."""


class BudgetExceededError(IsoagentError):
    """The run's token budget (``max_tokens_total``) or cost budget (``max_budget_usd``)
    ran out."""

    exit_code = 5


class RunInterruptedError(IsoagentError):
    """The run was interrupted (a ``Session.interrupt``, a child ended from outside)."""

    exit_code = 130


# how a run ended (its ``Result.status``, other than ok) to the class of that failure
STATUS_ERRORS: dict[str, type[IsoagentError]] = {
    "error": IsoagentError,  # ``API_ERRORS`` says which, when a model call failed
    "max_turns": TurnLimitError,
    "budget": BudgetExceededError,
    "cancelled": RunInterruptedError,
    "timeout": ChildTimeoutError,
    "crashed": ChildCrashedError,
    "launch_failed": ChildCrashedError,
}
# a failed model call's kind (``ModelError.kind``) to its class; a 404 is a model not found
API_ERRORS: dict[str, type[APIError]] = {
    "auth": AuthenticationError,
    "connection": APIConnectionError,
    "rate_limit": RateLimitError,
    "overloaded": APIError,
    "server": APIError,
    "api": APIError,
    "bad_request": APIError,
}
