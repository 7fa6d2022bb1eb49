"""What a run's tokens cost, in US dollars, for the result's ``total_cost_usd``.

Prices per million input and output tokens, as Claude Code 2.1 counts them (a prompt-cache
write costs 1.25 times an input token, a cache read 0.1 times); a model id
not listed is priced by its family (the word ``opus``, ``sonnet``, ``haiku`` or ``fable``
in it), and at zero when it names none (a local server's model).
"""

from __future__ import annotations

from isoagent.protocol import Usage

PER_MILLION: dict[str, tuple[float, float]] = {
    "claude-opus-5-5": (4.0, 20.0),
    "claude-opus-4-1": (4.0, 20.0),
    "claude-sonnet-5-5": (2.0, 10.0),
    "claude-sonnet-5": (2.0, 10.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-haiku-5-5": (0.5, 0.5),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-fable-5-2": (8.0, 40.0),
}
FAMILY_PRICES = {
    "opus": PER_MILLION["claude-opus-5-5"],
    "sonnet": PER_MILLION["claude-sonnet-5-5"],
    "haiku": PER_MILLION["claude-haiku-5-5"],
    "fable": PER_MILLION["claude-fable-5-2"],
}

BATCH_PRICE = 0.5  # of the price, for a Message Batch's tokens (its cache's too)


def per_token(model: str) -> tuple[float, float]:
    """US dollars an input token and an output token of ``model`` cost."""
    prices = PER_MILLION.get(model) or next(
        (price for family, price in FAMILY_PRICES.items() if family in model), (0.0, 0.0)
    )
    return prices[0] / 1_000_000, prices[1] / 1_000_000


def cost_usd(model: str, usage: Usage, rate: float = 1.0) -> float:
    """The price of ``usage`` on ``model``, times ``rate`` (``BATCH_PRICE`` in a batch)."""
    prices = per_token(model)
    inputs = (
        usage.input_tokens
        + 1.25 * usage.cache_creation_input_tokens
        + 0.1 * usage.cache_read_input_tokens
    )
    return rate * (inputs * prices[0] + usage.output_tokens * prices[1])
