"""Model names as Claude Code reads them: family aliases and their environment overrides.

``sonnet``, ``opus``, ``haiku`` and ``fable`` (any case, with or without a ``[1m]``
suffix) name the current model of that family, or ``ANTHROPIC_DEFAULT_<FAMILY>_MODEL``
when it is set; ``best`` and ``default`` are ``opus``, ``opusplan`` is ``sonnet`` (its
plan-mode half is Claude Code's own). Anything else is a model id, sent as written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

CURRENT_MODELS = {
    "sonnet": "claude-sonnet-5-5",
    "opus": "claude-opus-5-5",
    "haiku": "claude-haiku-5-5",
    "fable": "claude-fable-5-2",
}
_SYNONYMS = {"best": "opus", "default": "opus", "opusplan": "sonnet"}
INHERIT = "inherit"


def resolve_model(name: str, environ: Mapping[str, str] = os.environ) -> str:
    """The model id ``name`` stands for (``name`` itself when it is no alias)."""
    key = name.strip().lower().removesuffix("[1m]")
    family = _SYNONYMS.get(key, key)
    if family not in CURRENT_MODELS:
        return name.strip()
    return environ.get(f"ANTHROPIC_DEFAULT_{family.upper()}_MODEL") or CURRENT_MODELS[family]


def agent_model(name: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """An agent file's ``model``: None (the parent's model) for absent, empty or ``inherit``."""
    if name is None or not name.strip() or name.strip().lower() == INHERIT:
        return None
    return resolve_model(name, environ)
