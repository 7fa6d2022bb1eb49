"""``isoagent -p PROMPT``: ``claude -p`` as a drop-in, with Claude Code's flags.

It is ``isoagent run`` with Claude Code's names for things: ``--system-prompt``,
``--append-system-prompt``, ``--allowedTools``, ``--disallowedTools``, ``--agents JSON``,
``--permission-mode``, ``--add-dir`` (one of ``run``'s options), ``--continue``,
``--resume RUN``, ``--output-format``, and
``--input-format stream-json``, the control protocol the claude-agent-sdk speaks over
stdin (an ``initialize`` request answered first, then the prompt as a user message;
each further user message continues the conversation). Nothing goes to stderr but
warnings and errors, as with ``claude -p``. The SDK's other flags: ``sdk_options.py``
(those that are ``Options`` fields, and those refused by name), ``settings_flag.py``
(``--settings``), ``parent/claude_code/plugins.py`` (``--plugin-dir``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from isoagent.parent.claude_code.mcp_servers import SDK_ONLY
from isoagent.parent.claude_code.plugins import PluginRefused, plugin_agents
from isoagent.parent.claude_code.slash_commands import UnknownCommand
from isoagent.parent.cli.control_requests import PERMISSION_MODES
from isoagent.parent.cli.errors import OutputErrorsCommand, fail
from isoagent.parent.cli.exit_codes import EXIT_CODES_HELP, ExitCode
from isoagent.parent.cli.options import output_options
from isoagent.parent.cli.prompts import read_piped_stdin, read_prompt
from isoagent.parent.cli.sdk_options import KnowsItsFlags, sdk_flags, sdk_settings_options
from isoagent.parent.cli.settings_flag import (
    ClaudeSettings,
    Unsupported,
    read_settings,
    workspace_settings,
)
from isoagent.parent.cli.stream_session import (
    Printing,
    commands,
    run_prompt,
    serve_stream,
    slash_prompt,
)
from isoagent.parent.records.claude_sessions import ResumeRefused
from isoagent.parent.records.terminal_text import warn
from isoagent.parent.settings import Settings

if TYPE_CHECKING:
    pass


class _PrintModeCommand(OutputErrorsCommand, KnowsItsFlags):
    """Print mode's command: the SDK's unknown flags set aside, and output errors one line."""


@click.command(name="isoagent -p", epilog=EXIT_CODES_HELP, cls=_PrintModeCommand)
@click.argument("prompt", required=False)
@click.option("-p", "--print", "print_flag", is_flag=True, help="Print mode (this command).")
@click.option("--system-prompt", default="", help="Replace the parent's system prompt.")
@click.option("--append-system-prompt", default="", help="Add to the parent's system prompt.")
@click.option(
    "--system-prompt-file", type=click.File(encoding="utf-8"), help="--system-prompt, from a file."
)
@click.option(
    "--append-system-prompt-file",
    type=click.File(encoding="utf-8"),
    help="--append-system-prompt, from a file.",
)
@click.option(
    "--allowedTools",
    "--allowed-tools",
    "allowed_tools",
    multiple=True,
    help="Tools the parent may use besides reading, e.g. 'Bash(git:*) Edit' (comma or "
    "space separated; repeatable). Default: every tool.",
)
@click.option(
    "--disallowedTools",
    "--disallowed-tools",
    "disallowed_tools",
    multiple=True,
    help="Tools taken from the parent and every agent type, e.g. 'Write,Bash(rm:*)'.",
)
@click.option("--agents", "agents_json", help="Agent types as JSON, as Claude Code takes them.")
@click.option(
    "--permission-mode",
    type=click.Choice(PERMISSION_MODES),
    default="default",
    show_default=True,
    help="plan: nothing writes (read-only children, no bash in the parent).",
)
@click.option(
    "--dangerously-skip-permissions",
    "skip_permissions",
    is_flag=True,
    help="As Claude Code's: --permission-mode bypassPermissions (no tool call is asked "
    "about); the sandbox still holds.",
)
@click.option("--continue", "-c", "continue_", is_flag=True, help="Continue the latest run.")
@click.option(
    "--resume-session-at",
    metavar="UUID",
    help="With --resume: go on from the session's file up to and with this message.",
)
@click.option(
    "--resume-drops-turn",
    metavar="UUID",
    help="With --resume-session-at: the prompt that must be the first message left out.",
)
@click.option(
    "--session-mirror",
    is_flag=True,
    help="Each entry written to the session's file goes to stdout too (transcript_mirror), "
    "for the claude-agent-sdk's session_store.",
)
@click.option("--resume", "-r", "resume", help="Continue this session (a session id or a run id).")
@click.option(
    "--settings",
    "settings_value",
    metavar="JSON|FILE",
    help="Claude Code's settings: permissions (allow, deny, ask, defaultMode, "
    "additionalDirectories), model and hooks (command hooks, run by the parent) are applied; "
    "a setting isoagent cannot apply (env, ...) is refused.",
)
@click.option(
    "--plugin-dir",
    "plugin_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A Claude Code plugin's folder: its agents, as plugin:agent (repeatable); a plugin "
    "with hooks, MCP servers, commands or skills is refused.",
)
@click.option(
    "--permission-prompt-tool",
    metavar="stdio",
    help="stdio (with --input-format stream-json): the parent's tool calls that need a yes "
    "are asked of the claude-agent-sdk's can_use_tool.",
)
@click.option(
    "--input-format",
    type=click.Choice(["text", "stream-json"]),
    default="text",
    show_default=True,
    help="stream-json: the claude-agent-sdk's control protocol and user messages on stdin.",
)
@sdk_settings_options
@output_options
@sdk_flags
def print_mode(
    prompt: str | None,
    print_flag: bool,
    system_prompt: str,
    append_system_prompt: str,
    system_prompt_file: TextIO | None,
    append_system_prompt_file: TextIO | None,
    allowed_tools: tuple[str, ...],
    disallowed_tools: tuple[str, ...],
    agents_json: str | None,
    permission_mode: str,
    skip_permissions: bool,
    continue_: bool,
    resume: str | None,
    resume_session_at: str | None,
    resume_drops_turn: str | None,
    session_mirror: bool,
    settings_value: str | None,
    plugin_dirs: tuple[Path, ...],
    permission_prompt_tool: str | None,
    input_format: str,
    output_format: str,
    include_partial_messages: bool,
    settings: Settings,
    unsupported: str,
) -> None:
    """Run the parent agent on PROMPT and print the answer, as `claude -p` does.

    Without PROMPT the prompt is read from stdin; with one, piped stdin is attached.
    """
    from isoagent.parent.agent.parent_agent import claude_settings

    if permission_prompt_tool is not None and not unsupported:
        if permission_prompt_tool != "stdio":
            why = "isoagent asks only through stdio (the SDK's can_use_tool), not an MCP tool"
            unsupported = (
                f"--permission-prompt-tool {permission_prompt_tool} is not supported: {why}"
            )
        elif input_format != "stream-json":
            fail("error: --permission-prompt-tool stdio needs --input-format stream-json")
    from_file = ClaudeSettings()
    if settings_value is not None:
        try:
            from_file = read_settings(settings_value)
        except Unsupported as exc:
            unsupported = unsupported or f"--settings is not supported: {exc}"
        except ValueError as exc:
            fail(f"error: invalid --settings: {exc}", ExitCode.USAGE)
    from_file, lines = workspace_settings(settings.workspace_trust, from_file)
    for line in lines:
        warn(line)
    plugged: dict[str, Any] = {}
    plugins: list[tuple[str, str]] = []  # (name, folder)
    for folder in plugin_dirs:
        try:
            name, agents = plugin_agents(folder)
            plugged.update(agents)
            plugins.append((name, os.path.realpath(folder)))
        except PluginRefused as exc:
            unsupported = unsupported or f"--plugin-dir is not supported: {exc}"
        except ValueError as exc:
            fail(f"error: {exc}", ExitCode.USAGE)
    for name, why in settings.mcp_servers.failed.items():
        if why == SDK_ONLY and input_format == "stream-json":
            continue  # the SDK is there: its tools are listed before the first run
        warn(f"warning: MCP server {name!r} failed: {why}")  # and so in init, as Claude Code
    if unsupported and input_format != "stream-json":  # the SDK hears it at initialize
        fail(f"error: {unsupported}")
    for given, file, flag in (
        (system_prompt, system_prompt_file, "--system-prompt"),
        (append_system_prompt, append_system_prompt_file, "--append-system-prompt"),
    ):
        if given and file is not None:
            fail(f"error: {flag} and {flag}-file cannot be used together", ExitCode.USAGE)
    system_prompt = system_prompt_file.read() if system_prompt_file else system_prompt
    if append_system_prompt_file is not None:
        append_system_prompt = append_system_prompt_file.read()
    if from_file.default_mode and _given("permission_mode") is None:
        if from_file.default_mode not in PERMISSION_MODES:
            fail(
                f"error: invalid --settings: defaultMode {from_file.default_mode!r}", ExitCode.USAGE
            )
        permission_mode = from_file.default_mode
    if skip_permissions:
        permission_mode = bypass_permissions(permission_mode)
    settings = dataclasses.replace(
        settings,
        agents={**settings.agents, **plugged},
        plugins=tuple(plugins),
        hooks=from_file.hooks,
        budget_between_calls=True,  # Claude Code's --max-budget-usd: the call that crosses ends
    )
    refused = ""  # a resume --resume-drops-turn refuses: each run's result says so
    try:
        settings = _with_settings_file(settings, from_file)
        settings = claude_settings(
            settings,
            system_prompt=system_prompt,
            append_system_prompt=append_system_prompt,
            allowed_tools=(*allowed_tools, *from_file.allow),
            disallowed_tools=(*disallowed_tools, *from_file.deny),
            agents=agents_json,
            permission_mode=permission_mode,
            continue_=continue_,
            resume=resume,
            resume_at=resume_session_at or "",
            resume_drops=resume_drops_turn,
        )
    except ResumeRefused as exc:  # as Claude Code: the run's result says why
        if input_format != "stream-json":
            fail(f"error: {exc}")
        refused = str(exc)
    except ValueError as exc:
        fail(str(exc), ExitCode.USAGE)
    if permission_prompt_tool:
        settings = dataclasses.replace(settings, permission_prompt_tool=permission_prompt_tool)

    printing = Printing(output_format, include_partial_messages, session_mirror)
    if input_format == "stream-json":
        sys.exit(serve_stream(settings, printing, unsupported, refused))
    if prompt is None:
        prompt = read_prompt("-")
    else:
        prompt = read_prompt(prompt)
        piped = read_piped_stdin()
        if piped.strip():
            prompt = f"{prompt}\n{piped}"
    known = commands(settings)
    try:
        prompt, asked = slash_prompt(prompt, settings, known)
    except UnknownCommand as exc:
        fail(f"error: {exc}")
    if not prompt:  # /clear: one run has no conversation to clear
        sys.exit(ExitCode.OK)
    sys.exit(run_prompt(asked, prompt, printing, known=known)[0])


def bypass_permissions(asked: str) -> str:
    """``--dangerously-skip-permissions``: Claude Code's ``bypassPermissions``, said once;
    with another ``--permission-mode`` it is a usage error, as what to do is unclear."""
    if asked not in ("default", "bypassPermissions"):
        fail(
            f"--dangerously-skip-permissions is --permission-mode bypassPermissions: it "
            f"cannot go with --permission-mode {asked}",
            ExitCode.USAGE,
        )
    warn(
        "--dangerously-skip-permissions: no tool call is asked about (bypassPermissions); "
        "the sandbox still holds: each child as its agent type says, the parent's bash "
        "confined to the workspace"
    )
    return "bypassPermissions"


def _given(name: str) -> click.core.ParameterSource | None:
    """Where parameter ``name`` came from, unless it is its default (None then)."""
    source = click.get_current_context().get_parameter_source(name)
    return None if source in (None, click.core.ParameterSource.DEFAULT) else source


def _with_settings_file(settings: Settings, from_file: ClaudeSettings) -> Settings:
    """``settings`` with a ``--settings`` model (below ``--model`` and the environment),
    added folders and allowed domains; a ``ValueError`` says what cannot be used."""
    from isoagent.parent.claude_code.output_styles import output_style
    from isoagent.parent.model.aliases import resolve_model
    from isoagent.parent.options import added_dirs, child_network

    if from_file.model and _given("model") is None:
        settings = dataclasses.replace(settings, model=resolve_model(from_file.model))
    if from_file.output_style:  # above the settings files' own
        style = output_style(
            settings.workdir, settings.setting_sources, from_file.output_style, warn
        )
        settings = dataclasses.replace(settings, output_style=style)
    if from_file.add_dirs:
        more = added_dirs([*settings.add_dirs, *from_file.add_dirs])
        settings = dataclasses.replace(settings, add_dirs=more)
    if from_file.allowed_domains:  # an empty list lets nothing out: the network stays off
        domains = (*settings.allowed_domains, *from_file.allowed_domains)
        network = child_network(settings.child_network, domains, settings.remote is not None)
        settings = dataclasses.replace(settings, child_network=network, allowed_domains=domains)
    return settings
