"""Figures as people read them, one style everywhere: the closing line, ``logs``, the live
display, a batch's lines and the timeline all say a figure through here.

- tokens: ``1,680`` (every digit, grouped by thousands);
- cost: ``$0.0127`` under a dollar, ``$12.34`` from one;
- durations: ``45ms`` under a tenth of a second, ``3.2s``, ``2m05s``, ``1h02m``;
- counts with their noun: ``1 turn``, ``2 turns``, ``1 child``, ``3 children``.

"Turns" are model turns: each answer the model gave, in a run every agent's (the parent's
and each child's), as its tokens and cost are every agent's.
"""

from __future__ import annotations


def plural(n: int, one: str, many: str = "") -> str:
    """``1 tool call``, ``2 tool calls``; ``many`` where adding an s is wrong (children)."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def tokens(n: int) -> str:
    """``1,680 tokens``"""
    return plural(n, "token")


def usd(cost: float) -> str:
    """``$0.0127``; ``$12.34`` from a dollar on, where tenths of a cent say nothing."""
    return f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"


def duration(seconds: float) -> str:
    """``45ms``, ``3.2s``, ``2m05s``, ``1h02m``."""
    if seconds < 0.1:
        return f"{max(seconds, 0) * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
