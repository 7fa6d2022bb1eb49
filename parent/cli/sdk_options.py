"""Claude Code's flags that the claude-agent-sdk sends, beyond print mode's own.

Each works as in Claude Code (most become ``Options`` fields through ``settings_options``),
or is refused by name: ``isoagent: error: --session-mirror is not supported: <why>`` (the
answer to the SDK's ``initialize`` with ``--input-format stream-json``), never click's "no
such option".
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Callable
from typing import Any

import click

from isoagent.parent.cli.options import settings_options


def _tool_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    """``--tools``: "default" is every tool (None), "" none at all."""
    if value is None or value == "default":
        return None
    return [name for name in value.replace(",", " ").split() if name]


def _source_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    return None if value is None else [name for name in value.split(",") if name.strip()]


def _betas(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    return () if value is None else tuple(name for name in value.split(",") if name.strip())


def _schema(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        raise click.BadParameter("not JSON") from None


# flags whose values are ``Options`` fields
SDK_SETTINGS_OPTIONS = [
    click.option(
        "--tools", callback=_tool_list, metavar="TOOLS",
        help="The base tools of the parent and its children, e.g. 'Bash,Read,Task' (\"\": "
        "none, default: all); --allowedTools and --disallowedTools choose among them.",
    ),
    click.option(
        "--setting-sources", callback=_source_list, metavar="SOURCES",
        help="Whose agent files are read: user (~/.claude/agents), project "
        "(.claude/agents), local; comma separated (default: all).",
    ),
    click.option(
        "--json-schema", callback=_schema, metavar="SCHEMA",
        help="The parent answers with JSON of this schema, through a StructuredOutput tool: "
        "the result's structured_output.",
    ),
    click.option(
        "--fallback-model", metavar="MODEL",
        help="Model that calls to --model go on with once it has been overloaded (529) "
        "three times in a row; an id or alias.",
    ),
    click.option(
        "--session-id", metavar="UUID",
        help="The run's session id (default: its run id); with --resume or --continue only "
        "with --fork-session.",
    ),
    click.option(
        "--effort", metavar="LEVEL",
        help="The parent's effort (low, medium, high, max): its requests' output_config.",
    ),
    click.option(
        "--thinking", type=click.Choice(["adaptive", "disabled"]),
        help="The parent's thinking (default: none).",
    ),
    click.option(
        "--max-thinking-tokens", type=click.IntRange(0), metavar="N",
        help="The parent thinks with this budget (0: not at all).",
    ),
    click.option("--thinking-display", metavar="MODE", help="Its thinking's display."),
    click.option(
        "--task-budget", type=click.IntRange(1), metavar="TOKENS",
        help="Tokens the parent's model is told it has for the task (output_config).",
    ),
    click.option(
        "--betas", callback=_betas, metavar="BETAS",
        help="anthropic-beta headers for the parent's requests, comma separated.",
    ),
    click.option(
        "--fork-session", is_flag=True,
        help="--resume/--continue as a new session (default: the resumed run's session id).",
    ),
]  # fmt: skip


def sdk_settings_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``settings_options`` with the SDK's flags that are ``Options`` fields."""
    return settings_options(fn, extra=SDK_SETTINGS_OPTIONS, print_mode=True)


# flag -> why isoagent refuses it (the flag's value names the SDK option it comes from)
REFUSED = {
    "--resume-session-at": "isoagent resumes a conversation where it ended",
    "--resume-drops-turn": "isoagent resumes a conversation where it ended",
    "--session-mirror": "isoagent keeps its sessions in its run folders",
}
_FLAGS = {"--session-mirror"}  # the rest take a value
# flags that change nothing in isoagent, accepted as Claude Code accepts them
ACCEPTED = {
    "--include-hook-events": "isoagent does not print hook events: what a hook decided is "
    "in the tool results",
    "--debug-to-stderr": "isoagent's diagnostics go to stderr already (more with -v)",
}


class KnowsItsFlags(click.Command):
    """A command that sets aside the long flags it does not know (the SDK's ``extra_args``,
    a newer Claude Code's flags: ``--flag``, ``--flag=value``, ``--flag value``) before
    click parses the rest, for ``sdk_flags`` to refuse by name."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        known = {opt for param in self.get_params(ctx) for opt in param.opts}  # --help too
        kept: list[str] = []
        unknown: list[str] = []
        rest = iter(args)
        for arg in rest:
            if arg == "--":
                kept += [arg, *rest]
                break
            name = arg.split("=", 1)[0]
            if not arg.startswith("--") or name in known:
                kept.append(arg)
                continue
            unknown.append(name)
            if "=" not in arg:  # its value, if the next word is not a flag
                following = next(rest, None)
                if following is not None and following.startswith("-"):
                    kept.append(following)
        ctx.meta[UNKNOWN_FLAGS] = unknown
        return super().parse_args(ctx, kept)


UNKNOWN_FLAGS = "isoagent.unknown_flags"


def _unknown_flag(ctx: click.Context, stream_json: bool) -> str:
    """The first flag ``KnowsItsFlags`` set aside, refused for the SDK's ``initialize``;
    in text mode it is click's own error, with "did you mean", as for any command."""
    unknown = ctx.meta.get(UNKNOWN_FLAGS) or []
    if not unknown:
        return ""
    if not stream_json:
        known = [opt for param in ctx.command.params for opt in param.opts]
        close = difflib.get_close_matches(unknown[0], known)
        raise click.NoSuchOption(unknown[0], possibilities=close, ctx=ctx)
    return f"{unknown[0]} is not supported: isoagent does not know this flag"


def sdk_flags(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The SDK's flags isoagent refuses or has nothing to do for, and those it does not
    know; the command gets ``unsupported``: the first refused flag given, as one line
    ("" when none)."""
    options = [
        click.option(
            flag, f"refused_{flag[2:].replace('-', '_')}", hidden=True, is_flag=flag in _FLAGS
        )
        for flag in REFUSED
    ] + [
        click.option(flag, f"accepted_{flag[2:].replace('-', '_')}", is_flag=True, help=why)
        for flag, why in ACCEPTED.items()
    ]  # fmt: skip

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        unsupported = ""
        for flag, why in REFUSED.items():
            value = kwargs.pop(f"refused_{flag[2:].replace('-', '_')}")
            if value not in (None, False) and not unsupported:
                unsupported = f"{flag} is not supported: {why}"
        for flag in ACCEPTED:
            kwargs.pop(f"accepted_{flag[2:].replace('-', '_')}")
        stream_json = kwargs.get("input_format") == "stream-json"
        unsupported = unsupported or _unknown_flag(click.get_current_context(), stream_json)
        return fn(*args, unsupported=unsupported, **kwargs)

    for option in reversed(options):
        command = option(command)
    return command
