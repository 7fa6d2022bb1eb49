"""Help a person can read: a command's everyday options first, in full; the rest in named
groups, each listed by name (``--help-all`` shows them in full too). ``-h`` is ``--help``
everywhere."""

from __future__ import annotations

import textwrap
from typing import Any

import click

# every command's help and print mode's take -h too
HELP_NAMES: dict[str, Any] = {"help_option_names": ["-h", "--help"]}

# the options that are not everyday ones, by group, in the order the groups are shown
GROUPS: dict[str, tuple[str, ...]] = {
    "Agents and MCP servers": (
        "agents_dirs", "add_dirs", "max_depth", "max_parallel", "mcp_config",
        "strict_mcp_config",
    ),
    "Sandbox and network": (
        "sandbox", "allow_unsandboxed", "writable_git", "child_network", "allowed_domains",
        "local_fetch_hosts", "deny_read",
    ),
    "Limits": (
        "max_tokens_total", "api_retry_deadline", "cpu_seconds", "memory_mb", "max_processes",
        "max_file_size_mb", "child_disk_mb", "batch_window",
    ),
    "Output and records": (
        "include_partial_messages", "run_dir", "record", "replay", "replay_match",
    ),
    "Children on other machines": (
        "hosts", "launcher", "remote_python", "remote_workdir", "heartbeat", "retries",
        "retry_crashed", "launch_timeout",
    ),
}  # fmt: skip
GROUP_OF = {name: group for group, names in GROUPS.items() for name in names}
EVERYDAY = "Options"
_ALL = "isoagent.help_all"


def _help_all(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    ctx.meta[_ALL] = True
    click.echo(ctx.get_help(), color=ctx.color)
    ctx.exit()


class GroupedHelp(click.Command):
    """A command whose ``--help`` shows its everyday options in full and the others' names
    by group, and whose ``--help-all`` shows every option in full, by group."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        if not any(GROUP_OF.get(p.name or "") for p in params):
            return params
        every = click.Option(
            ["--help-all"], is_flag=True, expose_value=False, is_eager=True,
            callback=_help_all, help="Show every option in full, by group, and exit.",
        )  # fmt: skip
        return [*params, every]

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        full = ctx.meta.get(_ALL, False)
        groups: dict[str, list[tuple[click.Parameter, tuple[str, str]]]] = {EVERYDAY: []}
        groups |= {group: [] for group in GROUPS}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and isinstance(param, click.Option):
                groups[GROUP_OF.get(param.name or "", EVERYDAY)].append((param, record))
        for group, shown in groups.items():
            if not shown:
                continue
            with formatter.section(group):
                if full or group == EVERYDAY:
                    formatter.write_dl([record for _, record in shown])
                else:  # the names alone, none cut at its hyphen
                    names = ", ".join(_longest(param) for param, _ in shown)
                    width = max(formatter.width - formatter.current_indent, 20)
                    indent = " " * formatter.current_indent
                    text = textwrap.fill(names, width, break_on_hyphens=False)
                    formatter.write(textwrap.indent(text, indent) + "\n")
        if not full and any(shown for group, shown in groups.items() if group != EVERYDAY):
            formatter.write_paragraph()
            formatter.write_text(f"Every option in full: {ctx.command_path} --help-all")


def _longest(param: click.Parameter) -> str:
    return max(param.opts, key=len)


def hide(command: click.Command, name: str) -> None:
    """Keep ``name`` working on ``command`` but out of its help (an older spelling)."""
    for param in command.params:
        if param.name == name and isinstance(param, click.Option):
            param.hidden = True
