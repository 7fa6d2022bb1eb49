"""What isoagent reads of Claude Code's world: agent files, plugins, MCP server configs and
the SDK's in-process servers."""
