"""Output caps with a visible marker, so the model knows text is missing."""

from __future__ import annotations


def truncate(text: str, cap: int) -> str:
    """Keep the head and the tail of ``text`` within ``cap`` characters, marking the cut."""
    if cap <= 0 or len(text) <= cap:
        return text
    keep = max(cap - 100, 0)
    head, tail = text[: keep // 2], text[len(text) - (keep - keep // 2) :]
    return f"{head}\n[... {len(text) - keep} characters truncated by isoagent ...]\n{tail}"
