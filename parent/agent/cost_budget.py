"""A run's budgets as caps: ``--max-budget-usd`` (what its model calls may cost, the
parent's and every child's) and ``--max-tokens-total`` (the tokens they may use).

Each call reserves, before it is sent, the most it can cost: its input, estimated from the
request's size (tokens per byte learned from the answers, a third of a token a byte until
then), and ``max_tokens`` of output. It is sent only if what is left holds that: a call
whose whole ``max_tokens`` would not fit goes with fewer (the API stops there), and one
whose input alone would not is refused with the ``budget`` error, which ends its agent with
status ``budget`` (Claude Code's ``error_max_budget_usd``). The answer's real cost then
takes the reservation's place. So calls under way at once never commit more than is left.

The budget is shared fairly: of what the agents that ended did not take, each of the ``n``
agents running now may commit an equal share, its own spending counted in it (``(limit -
ended) / n - own``). An agent that spends in a tight loop reaches its share and ends
``budget`` while its siblings, whose first turn had not come, still have theirs; as agents
end, the share of those still running grows to what is left.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import msgspec

from isoagent.parent.model.conversation import calling_for
from isoagent.parent.model.gateway import ModelSource
from isoagent.parent.model.prices import cost_usd, per_token
from isoagent.protocol import ModelCall, ModelError, ModelReply, Usage

FIRST_TOKENS_PER_BYTE = 1 / 3  # of a request's JSON, before an answer has said
MARGIN = 1.15  # on the tokens per byte learned: a request above the mean is still covered
CACHE_WRITE = 1.25  # of an input token's price
_sizer = msgspec.json.Encoder()


def _nobody() -> Collection[str]:
    return ()


@dataclass
class SharedBudget:
    """An amount (US dollars, or tokens) the agents of a run spend, each call reserving its
    most first. ``running()``: the agents that share it now (the children running, by id,
    and the parent, "", while it runs); ``spent``: what earlier runs of the budget spent."""

    limit: float
    spent: float = 0.0
    running: Callable[[], Collection[str]] = _nobody
    reserved: float = 0.0
    committed: dict[str, float] = field(default_factory=dict)  # by agent: spent + reserved
    ran_out: bool = False  # what is left paid for no call, all of it to one agent

    @property
    def exhausted(self) -> bool:
        """Whether nothing (worth a call) is left: the next call is refused."""
        return self.ran_out or self.spent >= self.limit

    @property
    def left(self) -> float:
        """What is neither spent nor reserved."""
        return self.limit - self.spent - self.reserved

    def free(self, agent: str) -> float:
        """What ``agent`` may commit now: its fair share of what is left."""
        sharing = {*self.running(), agent}
        own = {name: self.committed.get(name, 0.0) for name in sharing}
        ended = self.spent + self.reserved - sum(own.values())  # earlier runs' too
        share = (self.limit - ended) / len(sharing) - own[agent]
        return max(min(self.left, share), 0.0)

    def sharers(self) -> int:
        return len(self.running()) or 1

    def reserve(self, agent: str, amount: float) -> None:
        self.reserved += amount
        self.committed[agent] = self.committed.get(agent, 0.0) + amount

    def settle(self, agent: str, reserved: float, cost: float) -> None:
        """A call is back: ``cost`` takes the place of what it ``reserved``."""
        self.reserved -= reserved
        self.spent += cost
        self.committed[agent] = self.committed.get(agent, 0.0) - reserved + cost


@dataclass
class Rates:
    """What a token costs in a budget's unit, by model: ``(input, output)``."""

    of: Callable[[str], tuple[float, float]]
    cost: Callable[[str, Usage], float]


def usd_rates(rate: float) -> Rates:
    """US dollars, at ``rate`` of the price (``BATCH_PRICE`` in Message Batches); an input
    token reserved at a cache write's price, the dearest one."""

    def of(model: str) -> tuple[float, float]:
        input_price, output_price = per_token(model)
        return CACHE_WRITE * input_price * rate, output_price * rate

    return Rates(of, lambda model, usage: cost_usd(model, usage, rate))


TOKENS = Rates(lambda model: (1.0, 1.0), lambda model, usage: float(usage.total))


class BudgetedSource:
    """A model source behind a ``SharedBudget``: each call reserves its most first."""

    def __init__(
        self,
        source: ModelSource,
        budget: SharedBudget,
        rates: Rates,
        name: str,
        *,
        between_calls: bool = False,
    ) -> None:
        """``name``: the budget's, for the refusal (``$0.5``); ``between_calls``: as
        Claude Code checks it (``-p``): a call is refused once the calls have spent it all,
        nothing is reserved, the call that crosses the line finishes."""
        self.between_calls = between_calls
        self.source = source
        self.budget = budget
        self.rates = rates
        self.name = name
        self.tokens_per_byte = FIRST_TOKENS_PER_BYTE

    @property
    def spent(self) -> float:
        return self.budget.spent

    @property
    def exhausted(self) -> bool:
        return self.budget.exhausted

    async def complete(self, call: ModelCall) -> ModelReply:
        if self.between_calls:
            if self.budget.exhausted:
                return ModelReply(turn=call.turn, error=ModelError("budget", self._refusal("")))
            reply = await self.source.complete(call)
            self.budget.spent += self.rates.cost(reply.model or call.model, reply.usage)
            return reply
        agent = calling_for.get()
        size = len(_sizer.encode(call))
        input_price, output_price = self.rates.of(call.model)
        input_cost = size * self.tokens_per_byte * MARGIN * input_price
        free = self.budget.free(agent)
        outputs = call.max_tokens
        if output_price > 0:
            outputs = min(outputs, int((free - input_cost) / output_price))
        if input_cost + output_price > self.budget.limit - self.budget.spent:  # nor will
            self.budget.ran_out = True
        if self.budget.exhausted or input_cost > free or outputs < 1:
            return ModelReply(turn=call.turn, error=ModelError("budget", self._refusal(agent)))
        if outputs < call.max_tokens:  # what is left pays for no more
            call = msgspec.structs.replace(call, max_tokens=outputs)
        reserved = input_cost + outputs * output_price
        self.budget.reserve(agent, reserved)
        cost = 0.0
        try:
            reply = await self.source.complete(call)
            cost = self.rates.cost(reply.model or call.model, reply.usage)
            self._learn(reply.usage, size)
        finally:  # a cancelled call frees its reservation
            self.budget.settle(agent, reserved, cost)
        return reply

    def _learn(self, usage: Usage, size: int) -> None:
        seen = (
            usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
        )
        if seen and size:
            self.tokens_per_byte = max(self.tokens_per_byte * 0.8 + 0.2 * seen / size, 0.05)

    def _refusal(self, agent: str) -> str:
        if self.between_calls or self.budget.exhausted or self.budget.sharers() <= 1:
            return f"Reached maximum budget ({self.name})"
        return (
            f"Reached this agent's share of the budget ({self.name}, shared by "
            f"{self.budget.sharers()} agents running)"
        )

    async def aclose(self) -> None:
        await self.source.aclose()
