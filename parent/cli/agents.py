"""``isoagent agents``: the agent types a run can use, their tools, and where each is defined."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import msgspec

from isoagent.parent.cli.exit_codes import ExitCode
from isoagent.parent.cli.options import load_catalog, workdir_option
from isoagent.parent.records.terminal_text import for_stdout


@click.command()
@workdir_option("Workspace whose .claude/agents/ to read (default: the current directory).")
@click.option(
    "--agents-dir",
    "agents_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Another folder of agent files (*.md, Claude Code format); repeatable.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the catalog as one JSON object.")
def agents(workdir: Path, agents_dirs: tuple[Path, ...], as_json: bool) -> None:
    """List the agent types: built-ins, ~/.claude/agents/, --agents-dir, .claude/agents/.

    A later source replaces an agent of the same name. Problems in agent files are
    listed on stderr; the exit code is 1 if a file could not be loaded.
    """
    catalog = load_catalog(workdir, agents_dirs)
    if as_json:
        sys.stdout.buffer.write(msgspec.json.encode(catalog) + b"\n")
    else:
        for spec in catalog.agents.values():  # an agent file's words, escaped on a terminal
            lines = [f"{spec.name}  ({_where(spec.source)})", f"  {spec.description}"]
            lines.append(f"  tools: {', '.join(spec.tools + spec.mcp_tools) or '(none)'}")
            extras = [f"model: {spec.model}"] if spec.model else []
            extras += [f"max turns: {spec.max_turns}"] if spec.max_turns else []
            if extras:
                lines.append(f"  {', '.join(extras)}")
            for line in lines:
                click.echo(for_stdout(line, lines=False))
    sys.exit(ExitCode.ERROR if catalog.errors else ExitCode.OK)


def _where(source: str) -> str:
    """A file source relative to the current directory, or ~/..., when it is below one."""
    path = Path(source)
    if not path.is_absolute():
        return source
    for base, label in ((Path.cwd(), ""), (Path.home(), "~/")):
        if path.is_relative_to(base):
            return label + str(path.relative_to(base))
    return source
