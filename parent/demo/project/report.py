"""A printable stock report: one line per item, then the totals."""

from __future__ import annotations

from inventory import Inventory
from pricing import with_vat


def stock_report(inventory: Inventory) -> str:
    """Items by name with quantity and value, marking those to reorder."""
    lines = [f"{'item':<12}{'qty':>5}{'value':>10}"]
    for name in sorted(inventory.items):
        item = inventory.items[name]
        flag = "  <- reorder" if item.needs_reorder else ""
        lines.append(f"{name:<12}{item.quantity:>5}{item.quantity * item.unit_price:>10.2f}{flag}")
    net = inventory.value()
    lines.append(f"{'total (net)':<17}{net:>10.2f}")
    lines.append(f"{'total (VAT)':<17}{with_vat(net):>10.2f}")
    return "\n".join(lines)
