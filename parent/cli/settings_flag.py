"""``--settings``: Claude Code's settings (JSON, or a file of it), as the SDK sends its
``settings`` and ``sandbox`` options: what isoagent applies, and what it refuses by name.

Applied: ``permissions`` (``allow`` adds to ``--allowedTools``; ``deny`` and ``ask``, with
nobody to ask, to ``--disallowedTools``; ``defaultMode`` unless ``--permission-mode`` is
given; ``additionalDirectories`` as ``--add-dir``) and ``model`` (below ``--model`` and
``ANTHROPIC_MODEL``, as in Claude Code). Keys that change only Claude Code's screen are
ignored. Any other key is refused: a hook or a sandbox setting must not be dropped quietly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# keys about Claude Code's own screen and housekeeping: nothing to do in a -p run
_IGNORED = frozenset(
    {
        "$schema", "statusLine", "outputStyle", "theme", "cleanupPeriodDays",
        "includeCoAuthoredBy", "spinnerTipsEnabled", "preferredNotifChannel", "verbose",
        "autoUpdates", "feedbackSurveyState",
    }
)  # fmt: skip
_REFUSED = {
    "hooks": "isoagent runs no hooks (a hook meant to block a call must not be ignored)",
    "sandbox": "isoagent's parent runs its commands unsandboxed (its children are always "
    "sandboxed)",
    "env": "isoagent takes its environment from its process, not from settings",
    "apiKeyHelper": "isoagent takes its key from ANTHROPIC_API_KEY",
}
_PERMISSIONS = frozenset({"allow", "deny", "ask", "defaultMode", "additionalDirectories"})


class Unsupported(Exception):
    """A setting isoagent does not apply; the message names it and says why."""


@dataclass(frozen=True)
class ClaudeSettings:
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()  # deny and ask rules
    default_mode: str = ""
    add_dirs: tuple[str, ...] = ()
    model: str = ""


def read_settings(value: str) -> ClaudeSettings:
    """``--settings VALUE``: a JSON object or the path of a file holding one. A
    ``ValueError`` says why it cannot be read, ``Unsupported`` what isoagent does not apply."""
    text = value.strip()
    if not text.startswith("{"):
        try:
            text = Path(text).read_text(encoding="utf-8-sig")
        except OSError as exc:
            raise ValueError(f"cannot read {value}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    for key, setting in data.items():
        if key in _REFUSED and not (key == "sandbox" and _disabled(setting)):
            raise Unsupported(f"{key!r}: {_REFUSED[key]}")
        if key not in _IGNORED and key not in _REFUSED and key not in ("permissions", "model"):
            raise Unsupported(f"{key!r}: isoagent does not apply this setting")
    permissions = data.get("permissions") or {}
    if not isinstance(permissions, dict):
        raise ValueError("permissions must be an object")
    for key in permissions:
        if key not in _PERMISSIONS:
            raise Unsupported(f"'permissions.{key}': isoagent does not apply this setting")
    return ClaudeSettings(
        allow=_rules(permissions, "allow"),
        deny=_rules(permissions, "deny") + _rules(permissions, "ask"),
        default_mode=str(permissions.get("defaultMode") or ""),
        add_dirs=_rules(permissions, "additionalDirectories"),
        model=str(data.get("model") or ""),
    )


def _disabled(sandbox: Any) -> bool:
    return isinstance(sandbox, dict) and not sandbox.get("enabled")


def _rules(permissions: dict[str, Any], key: str) -> tuple[str, ...]:
    rules = permissions.get(key) or []
    if not isinstance(rules, list) or not all(isinstance(rule, str) for rule in rules):
        raise ValueError(f"permissions.{key} must be a list of strings")
    return tuple(rules)
