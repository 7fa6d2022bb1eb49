"""What is on the shelves: items, quantities and when to reorder."""

from __future__ import annotations

from dataclasses import dataclass


class OutOfStock(Exception):
    """Raised when more units are taken than the shelf holds."""


@dataclass
class Item:
    name: str
    quantity: int
    unit_price: float
    reorder_level: int = 5

    @property
    def needs_reorder(self) -> bool:
        return self.quantity <= self.reorder_level


class Inventory:
    """A shelf of items, by name."""

    def __init__(self) -> None:
        self.items: dict[str, Item] = {}

    def add(self, name: str, quantity: int, unit_price: float, reorder_level: int = 5) -> Item:
        """Add units of an item; a known item keeps its price and gains the quantity."""
        if quantity < 0:
            raise ValueError("quantity must not be negative")
        item = self.items.get(name)
        if item is None:
            item = self.items[name] = Item(name, 0, unit_price, reorder_level)
        item.quantity += quantity
        return item

    def take(self, name: str, quantity: int) -> Item:
        """Remove units from the shelf, e.g. when they are sold."""
        item = self.items.get(name)
        if item is None or item.quantity < quantity:
            have = 0 if item is None else item.quantity
            raise OutOfStock(f"{name}: asked for {quantity}, have {have}")
        item.quantity -= quantity
        return item

    def to_reorder(self) -> list[Item]:
        """Items at or below their reorder level, fewest first."""
        return sorted(
            (item for item in self.items.values() if item.needs_reorder),
            key=lambda item: item.quantity,
        )

    def value(self) -> float:
        """What everything on the shelf is worth at its unit price."""
        return round(sum(item.quantity * item.unit_price for item in self.items.values()), 2)
