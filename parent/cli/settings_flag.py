"""``--settings``: Claude Code's settings (JSON, or a file of it), as the SDK sends its
``settings`` and ``sandbox`` options: what isoagent applies, and what it refuses by name.

Applied: ``permissions`` (``allow`` adds to ``--allowedTools``; ``deny`` and ``ask``, with
nobody to ask, to ``--disallowedTools``; ``defaultMode`` unless ``--permission-mode`` is
given; ``additionalDirectories`` as ``--add-dir``), ``model`` (below ``--model`` and
``ANTHROPIC_MODEL``, as in Claude Code), ``sandbox`` (isoagent always sandboxes its
children and the parent's commands; ``network.allowedDomains`` as ``--allowed-domains``)
and ``hooks`` (command hooks, run by the parent: ``parent/agent/hooks.py``).
Keys that change only Claude Code's screen are ignored. Any other key is refused: a hook or
a sandbox setting must not be dropped quietly.

The workspace's own ``.claude/settings.json`` and ``.claude/settings.local.json`` are applied
the same way, below ``--settings`` (``workspace_settings``): whole once the workspace is
trusted (``parent/trust/``), else only their ``deny`` and ``ask`` rules, which only take
away. Of those files, what isoagent does not apply is named in one line, not refused: the
user did not pass them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isoagent.parent.agent.hooks import Hooks, UnsupportedHook
from isoagent.parent.trust.claude_record import MCP_APPROVALS
from isoagent.parent.trust.workspace import Trust, read_file

# keys about Claude Code's own screen and housekeeping: nothing to do in a -p run
_IGNORED = frozenset(
    {
        "$schema", "statusLine", "outputStyle", "theme", "cleanupPeriodDays",
        "includeCoAuthoredBy", "spinnerTipsEnabled", "preferredNotifChannel", "verbose",
        "autoUpdates", "feedbackSurveyState",
    }
)  # fmt: skip
_REFUSED = {
    "env": "isoagent takes its environment from its process, not from settings",
    "apiKeyHelper": "isoagent takes its key from ANTHROPIC_API_KEY",
}
_APPLIED = frozenset({"permissions", "model", "sandbox", "hooks"})
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
    return _parse(data)


def _parse(data: dict[str, Any], not_applied: list[str] | None = None) -> ClaudeSettings:
    """Settings from their JSON; what isoagent does not apply is ``Unsupported``, or, given
    ``not_applied`` (a workspace file's), named there and left out."""

    def unsupported(what: str, why: str = "isoagent does not apply this setting") -> None:
        if not_applied is None:
            raise Unsupported(f"{what}: {why}")
        not_applied.append(what)

    for key in data:
        if key in _REFUSED:
            unsupported(repr(key), _REFUSED[key])
        elif key not in _IGNORED and key not in _APPLIED:
            unsupported(repr(key))
    permissions = data.get("permissions") or {}
    if not isinstance(permissions, dict):
        raise ValueError("permissions must be an object")
    for key in permissions:
        if key not in _PERMISSIONS:
            unsupported(f"'permissions.{key}'")
    raw_hooks = data.get("hooks") or {}
    if not isinstance(raw_hooks, dict):
        raise ValueError("hooks must be an object")
    hooks = Hooks()
    for event, groups in raw_hooks.items():  # one event isoagent cannot run leaves the others
        try:
            hooks = _joined(hooks, Hooks.from_settings({event: groups}))
        except UnsupportedHook as exc:
            what, _, why = str(exc).partition(": ")
            unsupported(what, why)
    return ClaudeSettings(
        hooks=hooks or None,
        allow=_rules(permissions, "allow"),
        deny=_rules(permissions, "deny") + _rules(permissions, "ask"),
        default_mode=str(permissions.get("defaultMode") or ""),
        add_dirs=_rules(permissions, "additionalDirectories"),
        model=str(data.get("model") or ""),
        allowed_domains=_allowed_domains(data.get("sandbox"), unsupported),
    )


def workspace_settings(
    trust: Trust | None, flag: ClaudeSettings
) -> tuple[ClaudeSettings, list[str]]:
    """``flag`` (``--settings``') with the workspace's settings files below it, as ``trust``
    (the run's: ``Settings.workspace_trust``) allows: a trusted file whole, another's deny
    and ask rules alone; and one line per file for what of it is not applied."""
    if trust is None:
        return flag, []
    merged, lines = ClaudeSettings(), []
    for name in trust.settings:
        data = read_file(trust.workdir / name)
        if data is None:
            continue
        try:
            parsed = json.loads(data)
            if not isinstance(parsed, dict):
                raise ValueError("not a JSON object")
            if not trust.trusted(name):  # only what takes away
                parsed = {"permissions": _taking_away(parsed.get("permissions"))}
            for key in MCP_APPROVALS:  # the workspace's trust reads them (parent/trust/)
                parsed.pop(key, None)
            not_applied: list[str] = []
            merged = _below(merged, _parse(parsed, not_applied))
        except ValueError as exc:
            lines.append(f"warning: {name} is not applied: {exc}")
            continue
        if not_applied:
            lines.append(f"warning: {name}: isoagent does not apply {', '.join(not_applied)}")
    return _below(merged, flag), lines


def _taking_away(permissions: Any) -> dict[str, Any]:
    if not isinstance(permissions, dict):
        return {}
    return {key: permissions[key] for key in ("deny", "ask") if key in permissions}


def _below(lower: ClaudeSettings, upper: ClaudeSettings) -> ClaudeSettings:
    """Two settings as one: their rules, folders, domains and hooks together, ``upper``'s
    mode and model where it has one."""
    domains = None
    if lower.allowed_domains is not None or upper.allowed_domains is not None:
        domains = (*(lower.allowed_domains or ()), *(upper.allowed_domains or ()))
    hooks = _joined(lower.hooks or Hooks(), upper.hooks or Hooks())
    return ClaudeSettings(
        allow=(*lower.allow, *upper.allow),
        deny=(*lower.deny, *upper.deny),
        default_mode=upper.default_mode or lower.default_mode,
        add_dirs=(*lower.add_dirs, *upper.add_dirs),
        model=upper.model or lower.model,
        allowed_domains=domains,
        hooks=hooks or None,
    )


def _joined(first: Hooks, second: Hooks) -> Hooks:
    """Both hooks, event by event, ``first``'s matchers before ``second``'s."""
    events = {
        event: (*first.events.get(event, ()), *second.events.get(event, ()))
        for event in dict.fromkeys([*first.events, *second.events])
    }
    return Hooks(events)


def _allowed_domains(sandbox: Any, unsupported: Callable[[str], None]) -> tuple[str, ...] | None:
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
                unsupported(f"'{where}.{key}'")
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
