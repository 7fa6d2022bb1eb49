"""``--settings``: Claude Code's settings (JSON, or a file of it), as the SDK sends its
``settings`` and ``sandbox`` options: what isoagent applies, and what it refuses by name.

Applied: ``permissions`` (``allow`` adds to ``--allowedTools``; ``deny`` and ``ask``, with
nobody to ask, to ``--disallowedTools``; ``defaultMode`` unless ``--permission-mode`` is
given; ``additionalDirectories`` as ``--add-dir``), ``model`` (below ``--model`` and
``ANTHROPIC_MODEL``, as in Claude Code), ``sandbox`` (isoagent always sandboxes its
children and the parent's commands; ``network.allowedDomains`` as ``--allowed-domains``),
``hooks`` (command hooks, run by the parent: ``parent/agent/hooks.py``) and ``outputStyle``
(``parent/claude_code/output_styles.py``).
Keys that change only Claude Code's screen are ignored. Any other key is refused: a hook or
a sandbox setting must not be dropped quietly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isoagent.parent.agent.hooks import Hooks, UnsupportedHook

# keys about Claude Code's own screen and housekeeping: nothing to do in a -p run
_IGNORED = frozenset(
    {
        "$schema", "statusLine", "theme", "cleanupPeriodDays",
        "includeCoAuthoredBy", "spinnerTipsEnabled", "preferredNotifChannel", "verbose",
        "autoUpdates", "feedbackSurveyState",
    }
)  # fmt: skip
_REFUSED = {
    "env": "isoagent takes its environment from its process, not from settings",
    "apiKeyHelper": "isoagent takes its key from ANTHROPIC_API_KEY",
}
_APPLIED = frozenset({"permissions", "model", "sandbox", "hooks", "outputStyle"})
_PERMISSIONS = frozenset({"allow", "deny", "ask", "defaultMode", "additionalDirectories"})
# what isoagent's sandbox already is (on, nothing to ask), and its one network setting
_SANDBOX = frozenset({"enabled", "autoAllowBashIfSandboxed", "network"})
_SANDBOX_NETWORK = frozenset({"allowedDomains"})


class Unsupported(Exception):
    """A setting isoagent does not apply; the message names it and says why."""


@dataclass(frozen=True)
class ClaudeSettings:
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()  # deny and ask rules
    default_mode: str = ""
    add_dirs: tuple[str, ...] = ()
    model: str = ""
    allowed_domains: tuple[str, ...] | None = None  # sandbox.network's; None: not given
    hooks: Hooks | None = None  # its command hooks; None: none
    output_style: str = ""  # outputStyle (parent/claude_code/output_styles.py)


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
    for key in data:
        if key in _REFUSED:
            raise Unsupported(f"{key!r}: {_REFUSED[key]}")
        if key not in _IGNORED and key not in _APPLIED:
            raise Unsupported(f"{key!r}: isoagent does not apply this setting")
    permissions = data.get("permissions") or {}
    if not isinstance(permissions, dict):
        raise ValueError("permissions must be an object")
    for key in permissions:
        if key not in _PERMISSIONS:
            raise Unsupported(f"'permissions.{key}': isoagent does not apply this setting")
    try:
        hooks = Hooks.from_settings(data["hooks"]) if "hooks" in data else None
    except UnsupportedHook as exc:
        raise Unsupported(str(exc)) from None
    return ClaudeSettings(
        hooks=hooks or None,
        allow=_rules(permissions, "allow"),
        deny=_rules(permissions, "deny") + _rules(permissions, "ask"),
        default_mode=str(permissions.get("defaultMode") or ""),
        add_dirs=_rules(permissions, "additionalDirectories"),
        model=str(data.get("model") or ""),
        allowed_domains=_allowed_domains(data.get("sandbox")),
        output_style=str(data.get("outputStyle") or ""),
    )


def _allowed_domains(sandbox: Any) -> tuple[str, ...] | None:
    """``sandbox.network.allowedDomains`` of an enabled sandbox (None: not given)."""
    if sandbox is None:
        return None
    if not isinstance(sandbox, dict):
        raise ValueError("sandbox must be an object")
    if not sandbox.get("enabled"):
        return None
    network = sandbox.get("network") or {}
    if not isinstance(network, dict):
        raise ValueError("sandbox.network must be an object")
    for where, keys, known in (
        ("sandbox", sandbox, _SANDBOX),
        ("sandbox.network", network, _SANDBOX_NETWORK),
    ):
        for key in keys:
            if key not in known:
                raise Unsupported(f"'{where}.{key}': isoagent does not apply this setting")
    return (
        _rules(network, "allowedDomains", "sandbox.network")
        if "allowedDomains" in network
        else None
    )


def _rules(within: dict[str, Any], key: str, where: str = "permissions") -> tuple[str, ...]:
    rules = within.get(key) or []
    if not isinstance(rules, list) or not all(isinstance(rule, str) for rule in rules):
        raise ValueError(f"{where}.{key} must be a list of strings")
    return tuple(rules)
