"""What a session's model calls cost, as its events tell it: each agent's answers priced
by the model that gave them."""

from __future__ import annotations

from isoagent.parent.model.prices import cost_usd
from isoagent.parent.records.events import ChildStarted, Event, MessageAdded, RunStarted
from isoagent.protocol import Usage


class Costs:
    """A session's sink: what each agent's model calls cost, by child id ("": the parent),
    and what every agent's used; ``rate``: of the price (``BATCH_PRICE`` in Message Batches)."""

    def __init__(self, model: str = "", *, rate: float = 1.0) -> None:
        self.rate = rate
        self.models = {"": model}
        self.usd: dict[str, float] = {}
        self.usage = Usage()

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.models[""] = event.model
            self.rate = event.price_rate
        elif isinstance(event, ChildStarted):
            self.models[event.child] = event.model
        elif isinstance(event, MessageAdded) and event.usage is not None:
            model = event.model or self.models.get(event.child, self.models[""])
            cost = cost_usd(model, event.usage, self.rate)
            self.usd[event.child] = self.usd.get(event.child, 0.0) + cost
            self.usage = self.usage + event.usage

    @property
    def total(self) -> float:
        return sum(self.usd.values())
