"""What things cost: prices with VAT, rounding to the cent, and special offers."""

from __future__ import annotations

VAT_RATE = 0.20


def with_vat(net: float, rate: float = VAT_RATE) -> float:
    """The gross price of a net amount, rounded to the cent."""
    if net < 0:
        raise ValueError("a price must not be negative")
    return round(net * (1 + rate), 2)


def line_total(quantity: int, unit_price: float) -> float:
    """Price of `quantity` units, rounded to the cent."""
    if quantity < 0:
        raise ValueError("quantity must not be negative")
    return round(quantity * unit_price, 2)


def three_for_two(quantity: int, unit_price: float) -> float:
    """The shop's favourite offer: every third unit is free."""
    paid = quantity - quantity // 3
    return line_total(paid, unit_price)


def cheapest(offers: dict[str, float]) -> str:
    """Name of the cheapest offer; ties go to the name that sorts first."""
    if not offers:
        raise ValueError("no offers to compare")
    return min(sorted(offers), key=lambda name: offers[name])
