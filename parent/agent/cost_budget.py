"""``--max-budget-usd``: what a run's model calls may cost, the parent's and every child's.

A model source around the run's own: once the calls have cost the budget, the next one is
refused with the ``budget`` error, which ends its agent with status ``budget`` (Claude
Code's ``error_max_budget_usd``). As in Claude Code the check is between calls: the call
that crosses the line finishes, and calls already under way do too.
"""

from __future__ import annotations

from isoagent.parent.model.gateway import ModelSource
from isoagent.parent.model.prices import cost_usd
from isoagent.protocol import ModelCall, ModelError, ModelReply


class CostBudget:
    def __init__(
        self, source: ModelSource, max_usd: float, spent: float = 0.0, rate: float = 1.0
    ) -> None:
        """``spent``: what earlier runs of the same session spent (the SDK's later messages);
        ``rate``: of the price, what the source's calls cost (``BATCH_PRICE``)."""
        self.source = source
        self.max_usd = max_usd
        self.spent = spent
        self.rate = rate

    @property
    def exhausted(self) -> bool:
        """Whether the calls have cost the budget: the next one is refused."""
        return self.spent >= self.max_usd

    async def complete(self, call: ModelCall) -> ModelReply:
        if self.exhausted:
            message = f"Reached maximum budget (${self.max_usd:g})"
            return ModelReply(turn=call.turn, error=ModelError("budget", message))
        reply = await self.source.complete(call)
        self.spent += cost_usd(reply.model or call.model, reply.usage, self.rate)
        return reply

    async def aclose(self) -> None:
        await self.source.aclose()
