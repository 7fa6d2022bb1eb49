"""What Claude Code has recorded about a workspace, read as Claude Code 2.1 reads it (never
written): its trust dialog's answer and its approvals of a project's ``.mcp.json`` servers.

- ``~/.claude.json`` (``$CLAUDE_CONFIG_DIR/.claude.json``): ``projects[FOLDER]
  .hasTrustDialogAccepted``, for the workspace or a folder above it (Claude Code counts a
  trusted folder's sub-folders trusted too), and that entry's ``enabledMcpjsonServers`` /
  ``disabledMcpjsonServers``;
- the user's settings (``~/.claude/settings.json``, ``$CLAUDE_CONFIG_DIR/settings.json``)
  and the workspace's own (``.claude/settings.json``, ``.claude/settings.local.json``):
  ``enableAllProjectMcpServers``, ``enabledMcpjsonServers``, ``disabledMcpjsonServers``.

``workspace.py`` decides what of it counts, and ``docs/pages/claude-code.md`` says why.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isoagent.parent.claude_code.user_files import config_dir, read_regular

MAX_FILE = 64 * 1024 * 1024  # ~/.claude.json holds every project's history: it grows
MCP_APPROVALS = ("enableAllProjectMcpServers", "enabledMcpjsonServers", "disabledMcpjsonServers")


def global_config() -> Path:
    """``$CLAUDE_CONFIG_DIR/.claude.json``, else ``~/.claude.json``."""
    folder = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(folder) / ".claude.json" if folder else Path.home() / ".claude.json"


def read_json(path: Path, limit: int = MAX_FILE) -> dict[str, Any]:
    """A JSON object from ``path`` ({} when it is missing, too big or not such JSON)."""
    data = read_regular(path, limit + 1)
    try:
        parsed = json.loads(data) if data is not None and len(data) <= limit else None
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def trusting_folder(workspace: Path, projects: Mapping[str, Any] | None = None) -> Path | None:
    """The folder (the workspace or one above it) whose Claude Code trust dialog was
    accepted, if any."""
    if projects is None:
        projects = _projects()
    for folder in (workspace, *workspace.parents):
        entry = projects.get(str(folder))
        if isinstance(entry, dict) and entry.get("hasTrustDialogAccepted") is True:
            return folder
    return None


@dataclass(frozen=True)
class McpApprovals:
    """Claude Code's answers about a project's ``.mcp.json`` servers."""

    enable_all: bool = False
    enabled: frozenset[str] = frozenset()
    disabled: frozenset[str] = frozenset()

    def approves(self, name: str) -> bool:
        return name not in self.disabled and (self.enable_all or name in self.enabled)


def mcp_approvals(
    workspace: Path, settings: Iterable[Mapping[str, Any]] = (), *, trusted: bool
) -> McpApprovals:
    """The approvals of the user's settings, ``~/.claude.json``'s entry for ``workspace``,
    and ``settings`` (the workspace's own files): their refusals always (they only take
    away), what they approve only when ``trusted`` (a repository's own settings file would
    otherwise approve its servers)."""
    sources = [read_json(config_dir() / "settings.json"), _projects().get(str(workspace)) or {}]
    approving = [*sources, *settings] if trusted else sources
    enable_all = any(s.get("enableAllProjectMcpServers") is True for s in approving)
    enabled = {name for s in approving for name in _names(s, "enabledMcpjsonServers")}
    disabled = {name for s in (*sources, *settings) for name in _names(s, "disabledMcpjsonServers")}
    return McpApprovals(enable_all, frozenset(enabled), frozenset(disabled))


def _projects() -> dict[str, Any]:
    projects = read_json(global_config()).get("projects")
    return projects if isinstance(projects, dict) else {}


def _names(settings: Mapping[str, Any], key: str) -> list[str]:
    names = settings.get(key) if isinstance(settings, Mapping) else None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
