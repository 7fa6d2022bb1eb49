"""``--plugin-dir``: a Claude Code plugin's agent types and slash commands, as Claude Code
names them (``plugin:agent``, ``/plugin:command``); a plugin with parts isoagent cannot run
is refused by name.

A plugin is a folder with ``.claude-plugin/plugin.json`` (its ``name``; without it, the
folder's name) and components in conventional folders or where the manifest says. isoagent
runs its ``agents`` and the commands of its ``commands`` folder
(``slash_commands.load_commands``). Hooks, MCP servers, skills, output styles and LSP servers it
cannot run, and a plugin is made of them for a reason: such a plugin is refused rather
than half loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from isoagent.parent.claude_code.agent_files import load_agents
from isoagent.protocol import AgentSpec

# component -> (its conventional place, why isoagent does not load it)
_REFUSED: dict[str, tuple[str | None, str]] = {
    "hooks": ("hooks/hooks.json", "isoagent does not load a plugin's hooks"),
    "mcpServers": (".mcp.json", "isoagent does not start a plugin's MCP servers"),
    "commands": (None, "isoagent reads a plugin's commands folder only"),  # the manifest's
    "skills": ("skills", "isoagent has no skills"),
    "outputStyles": ("output-styles", "isoagent has no output styles"),
    "lspServers": (".lsp.json", "isoagent runs no LSP servers"),
}


class PluginRefused(Exception):
    """A plugin with a part isoagent cannot run; the message names the plugin and the part."""


def plugin_agents(folder: Path) -> tuple[str, dict[str, AgentSpec]]:
    """The name of the plugin in ``folder`` and its agent types, named ``plugin:agent``. A
    ValueError says why it cannot be read, ``PluginRefused`` what of it isoagent cannot run."""
    if not folder.is_dir():
        raise ValueError(f"--plugin-dir {folder}: not a folder")
    manifest_path = folder / ".claude-plugin" / "plugin.json"
    manifest: dict[str, object] = {}
    if manifest_path.is_file():
        try:
            loaded = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"--plugin-dir {folder}: {manifest_path.name}: {exc}") from None
        manifest = loaded if isinstance(loaded, dict) else {}
    name = str(manifest.get("name") or folder.name)
    for component, (place, why) in _REFUSED.items():
        if manifest.get(component) or (place is not None and (folder / place).exists()):
            raise PluginRefused(f"plugin {name!r} has {component}: {why}")
    places = manifest.get("agents") or []
    places = [places] if isinstance(places, str) else places
    if not isinstance(places, list):
        raise ValueError(f"--plugin-dir {folder}: its agents must be a path or a list of paths")
    dirs = [folder / "agents", *(folder / str(place) for place in places)]
    catalog = load_agents(folder, extra_dirs=dirs, user=False, project=False)
    if catalog.errors:
        raise ValueError(f"--plugin-dir {folder}: {catalog.errors[0].describe()}")
    return name, {
        f"{name}:{spec.name}": msgspec.structs.replace(spec, name=f"{name}:{spec.name}")
        for spec in catalog.agents.values()
        if spec.source  # a file's, not one of the built-in types
    }
