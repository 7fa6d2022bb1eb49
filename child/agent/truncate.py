"""Output caps with a visible marker, so the model knows text is missing."""

from __future__ import annotations

MARKER_ROOM = 100  # characters of a cap left for the marker line


def keep_sizes(cap: int) -> tuple[int, int]:
    """How much of the head and of the tail a ``cap``-sized result keeps."""
    keep = max(cap - MARKER_ROOM, 0)
    return keep // 2, keep - keep // 2


def mark_cut(head: str, tail: str, omitted: int, unit: str = "characters") -> str:
    return f"{head}\n[... {omitted} {unit} truncated by isoagent ...]\n{tail}"


def truncate(text: str, cap: int) -> str:
    """Keep the head and the tail of ``text`` within ``cap`` characters, marking the cut."""
    if cap <= 0 or len(text) <= cap:
        return text
    head, tail = keep_sizes(cap)
    return mark_cut(text[:head], text[len(text) - tail :], len(text) - head - tail)
