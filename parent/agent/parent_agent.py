"""The parent agent as Claude Code's flags shape it: its tools, its prompt, its earlier
conversation (``--allowedTools``, ``--disallowedTools``, ``--permission-mode``,
``--system-prompt``, ``--append-system-prompt``, ``--resume``/``--continue``).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from isoagent.child.agent.builtin_agents import TASK_ALIASES, TASK_TOOL, WRITE_TOOLS
from isoagent.child.agent.tools.base import Tool, ToolContext
from isoagent.child.agent.tools.mcp import (
    McpSessions,
    McpUnavailable,
    ServerTool,
    granted,
    mcp_tools,
)
from isoagent.parent.claude_code.agent_files import (
    PLAN_MODE,
    InvalidAgent,
    build_spec,
    check_names,
    inline_agents,
    tool_entries,
)
from isoagent.parent.claude_code.mcp_servers import PREFIX as MCP_PREFIX
from isoagent.parent.claude_code.mcp_servers import whole_server
from isoagent.parent.records.claude_sessions import conversation_in_file, session_path
from isoagent.parent.records.events import AnyEvent, MessageAdded, RunStarted, decode_event
from isoagent.parent.records.figures import plural
from isoagent.parent.records.past_run import read_events
from isoagent.parent.records.run_seal import LOG, first_line, sealed_events
from isoagent.parent.records.terminal_text import warn
from isoagent.parent.settings import Settings
from isoagent.protocol import (
    AgentSpec,
    McpReply,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

_NEVER_ASKS = ("Read", "Glob", "Grep")  # Claude Code runs reads without permission


class ResumeError(Exception):
    """The run to continue does not exist or holds no conversation."""


def claude_settings(
    settings: Settings,
    *,
    system_prompt: str = "",
    append_system_prompt: str = "",
    allowed_tools: Sequence[str] = (),
    disallowed_tools: Sequence[str] = (),
    agents: str | dict[str, Any] | None = None,
    permission_mode: str = "default",
    continue_: bool = False,
    resume: str | None = None,
    resume_at: str = "",
    resume_drops: str | None = None,
) -> Settings:
    """``settings`` with Claude Code's flags applied (``isoagent -p``, the Python API).
    Tool lists take comma or space separated rules; ``agents`` is ``--agents`` JSON (or
    its dict); ``resume_at``, ``resume_drops``: ``--resume-session-at``,
    ``--resume-drops-turn``. Raises ValueError with a one-line reason (a ``ResumeRefused``
    for a resume those two refuse)."""
    catalog = dict(settings.agents)
    if agents is not None:
        text = agents if isinstance(agents, str) else json.dumps(agents)
        try:
            catalog.update(inline_agents(text))
        except ValueError as exc:
            raise ValueError(f"invalid --agents: {exc}") from None
    disallowed = tuple(e for value in disallowed_tools for e in tool_entries(value))
    allowed = tuple(e for value in allowed_tools for e in tool_entries(value))
    for flag, entries in (
        ("--allowedTools", allowed), ("--disallowedTools", disallowed),
        ("--tools", settings.tools or ()),
    ):  # fmt: skip
        try:
            check_names(entries, flag)
        except InvalidAgent as exc:
            raise ValueError(exc.message) from None
    try:
        catalog = restrict_agents(catalog, disallowed, permission_mode, allowed, settings.tools)
    except InvalidAgent as exc:
        raise ValueError(f"--disallowedTools: {exc.message}") from None
    settings = dataclasses.replace(
        settings,
        agents=catalog,
        system_prompt=system_prompt,
        append_system_prompt=append_system_prompt,
        allowed_tools=allowed,
        disallowed_tools=disallowed,
        permission_mode=permission_mode,
    )
    if continue_ or resume:
        if settings.session_id and not settings.fork_session:
            raise ValueError(
                "--session-id can be used with --continue or --resume only with --fork-session"
            )
        try:
            settings = _resumed(settings, resume, resume_at, resume_drops)
        except ResumeError as exc:
            raise ValueError(str(exc)) from None
    elif settings.session_id:
        _check_new_session(settings.runs_dir, settings.session_id)
    return settings


def _resumed(settings: Settings, resume: str | None, at: str, drops: str | None) -> Settings:
    """``settings`` going on with ``resume`` (a run or session id; None: the latest run):
    from its run folder, or from its session file (one a ``SessionStore`` brought back, or
    any with ``at``: ``--resume-session-at`` names a message of it). ``ResumeError``: there
    is nothing to go on with; ``ResumeRefused``: ``drops`` does not allow cutting at ``at``."""
    runs = settings.runs_dir
    fork = settings.session_id if settings.fork_session else ""
    try:
        if at:
            raise ResumeError(f"--resume-session-at needs the session's file: {resume}")
        run_id = find_run(runs, resume) if resume else latest_run(runs)
        earlier_conversation(runs, run_id)  # it exists and can go on
    except ResumeError:
        file = session_path(settings.workdir, resume) if resume and _is_uuid(resume) else None
        if file is None or not file.is_file():
            raise
        conversation_in_file(file, at, drops)  # it can be cut there
        return dataclasses.replace(
            settings, resume_file=file, resume_at=at, resume_drops=drops,
            session_id=fork if settings.fork_session else str(resume),
        )  # fmt: skip
    session = fork if settings.fork_session else run_session(runs, run_id)
    return dataclasses.replace(settings, resume=run_id, session_id=session)


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def conversation_to_resume(settings: Settings) -> list[Message]:
    """The conversation the parent goes on with ([]: none)."""
    if settings.resume_file is not None:
        at, drops = settings.resume_at, settings.resume_drops
        return go_on_from(conversation_in_file(settings.resume_file, at, drops))
    return earlier_conversation(settings.runs_dir, settings.resume)


def _check_new_session(runs_dir: Path, session: str) -> None:
    """A ``--session-id`` must be a UUID no run has used, as in Claude Code."""
    try:
        uuid.UUID(session)
    except ValueError:
        raise ValueError(f"invalid --session-id {session!r}: it must be a UUID") from None
    try:
        find_run(runs_dir, session)
    except ResumeError:
        return
    raise ValueError(f"session id {session} is already in use")


def find_run(runs_dir: Path, session: str) -> str:
    """The newest run of session ``session`` (a run id is its own run's session id) among
    those this user's isoagent wrote (``run_seal``)."""
    if "/" not in session and session not in (".", "..") and (runs_dir / session).is_dir():
        if sealed_events(runs_dir / session) is None:
            raise ResumeError(f"run {session!r} in {runs_dir} {NOT_WRITTEN}: not continued")
        return session
    for run in _runs_newest_first(runs_dir):
        if _claimed_session(run) != session:  # a first line read, before the whole is checked
            continue
        events = sealed_events(run)
        if events is not None and _session_of(events, run.name) == session:
            return run.name
    raise ResumeError(f"no run {session!r} in {runs_dir}")


def _claimed_session(run: Path) -> str:
    """The session a run's first record names, unchecked: whether to check the run."""
    first = first_line(run)
    try:
        return _session_of([decode_event(first)], run.name) if first else run.name
    except msgspec.DecodeError:
        return run.name


def run_session(runs_dir: Path, run_id: str) -> str:
    """The session run ``run_id`` belongs to: its start record's, else its own id."""
    return _session_of(sealed_events(runs_dir / run_id) or [], run_id)


def _session_of(events: list[AnyEvent], run_id: str) -> str:
    first = events[0] if events else None
    return (isinstance(first, RunStarted) and first.session_id) or run_id


def parent_tools(settings: Settings) -> AgentSpec:
    """The parent's tools (names, and its bash rules). With ``allowed_tools`` (Claude
    Code's ``--allowedTools``: what may run without asking, where nobody can be asked) the
    parent keeps the read-only tools and gets what the rules name (and the edits under
    ``acceptEdits``; ``bypassPermissions`` asks for nothing); ``disallowed_tools`` and
    plan mode take away. Plan mode also takes bash: the parent's commands are unsandboxed.
    ``tools`` (``--tools``) is the set all this chooses from (``Agent`` only if it names it)."""
    asks = bool(settings.permission_prompt_tool)  # then the rules say what needs no asking
    unasked = _unasked(settings.allowed_tools, settings.permission_mode)
    fields: dict[str, object] = {
        "tools": None if asks else unasked,
        # the MCP tools' rules are parent_mcp_tools' (a server's tool may be kept from a
        # server --allowedTools gives whole)
        "disallowedTools": [
            r
            for r in settings.disallowed_tools
            if not (r in TASK_ALIASES or r.startswith(MCP_PREFIX))
        ],
        "permissionMode": settings.permission_mode,
    }
    spec, _ = build_spec("parent", "the parent agent", "", fields, source="flags")
    tools = list(spec.tools)
    if settings.tools is not None:  # --tools: the base set, before any rule
        base, _ = build_spec("parent", "", "", {"tools": list(settings.tools)}, source="")
        tools = [t for t in tools if t in base.tools]
    if settings.permission_mode == PLAN_MODE:
        tools = [t for t in tools if t != "Bash"]
    offered = settings.tools is None or TASK_ALIASES & set(settings.tools)
    if offered and not TASK_ALIASES & set(settings.disallowed_tools):
        tools.append(TASK_TOOL)
    return msgspec.structs.replace(spec, tools=tools)


def parent_mcp_tools(
    settings: Settings, ctx: ToolContext
) -> tuple[list[Tool[Any]], McpSessions | None]:
    """The parent's MCP tools, as Claude Code's main agent has them: every tool of the
    session's servers (``McpServers.for_parent``) but those ``--disallowedTools`` names
    (``mcp__s``, ``mcp__s__*``, ``mcp__s__t``); ``--tools`` leaves them be, and whether a
    call needs a yes is ``asking_tools``'s to say. A stdio server runs as the parent's
    commands do (``ctx``: under a writing child's sandbox). A server that cannot start or
    be used is named on stderr and the parent goes on without it. The sessions the stdio
    servers run in (None: none does) are the caller's to close."""
    servers, unusable = settings.mcp_servers.for_parent()
    denied = [
        whole_server(rule) for rule in settings.disallowed_tools if rule.startswith(MCP_PREFIX)
    ]
    relay = settings.mcp_servers.relay

    def call_sdk_tool(server: str, tool: str, arguments: dict[str, Any]) -> McpReply:
        assert relay is not None  # an SDK server is one of ``servers`` once listed through it
        return McpReply(0, *relay(server, tool, arguments))

    tools: list[Tool[Any]] = []
    sessions = None
    for server in servers:
        if MCP_PREFIX + server.name in denied:
            continue
        if server.type != "sdk" and sessions is None:
            sessions = McpSessions()
        try:
            every = [MCP_PREFIX + server.name]
            tools += mcp_tools([server], every, ctx, call_sdk_tool, sessions)
        except McpUnavailable as exc:
            settings.mcp_servers.started[server.name] = str(exc)
            warn(f"warning: {exc}; the parent agent goes on without it")
        else:
            settings.mcp_servers.started[server.name] = ""
    for name, why in unusable.items():
        warn(f"warning: MCP server {name!r} failed: {why}")
    kept = [
        t for t in tools if not (isinstance(t, ServerTool) and granted(denied, t.server, t.tool))
    ]
    return kept, sessions


def restrict_agents(
    agents: dict[str, AgentSpec],
    disallowed: tuple[str, ...],
    permission_mode: str,
    allowed: tuple[str, ...] = (),
    base: Sequence[str] | None = None,
) -> dict[str, AgentSpec]:
    """Agent types under a session's ``--disallowedTools``, ``--permission-mode plan``,
    ``--allowedTools`` (as in Claude Code, whose subagents have the session's permissions:
    with nobody to ask, a child keeps the read-only tools and what the rules name) and
    ``--tools`` (``base``: the session's tools, a child's too); raises
    agent_files.InvalidAgent for a tool name isoagent does not know."""
    unasked = _unasked(allowed, permission_mode)
    if not disallowed and permission_mode != PLAN_MODE and unasked is None and base is None:
        return agents
    session = None
    if unasked is not None:
        session, _ = build_spec("", "", "", {"tools": unasked}, source="")
    pool = None if base is None else build_spec("", "", "", {"tools": list(base)}, source="")[0]
    restricted = {}
    for name, spec in agents.items():
        fields = {
            "tools": list(spec.tools),
            "disallowedTools": list(disallowed),
            "permissionMode": permission_mode,
        }
        narrowed, _ = build_spec(name, spec.description, spec.system_prompt, fields, source="")
        tools = [t for t in narrowed.tools if t in spec.tools]
        if permission_mode == PLAN_MODE:
            tools = [t for t in tools if t not in WRITE_TOOLS]
        if pool is not None:
            tools = [t for t in tools if t in pool.tools]
        bash_allow: list[str] | None = spec.bash_allow
        if session is not None:
            tools = [t for t in tools if t in session.tools]
            bash_allow = _both(spec.bash_allow, session.bash_allow)
            if bash_allow is None:  # no command both allow
                tools = [t for t in tools if t != "Bash"]
        restricted[name] = msgspec.structs.replace(
            spec,
            tools=tools,
            bash_allow=bash_allow or [],
            bash_deny=[*spec.bash_deny, *narrowed.bash_deny],
            delegates=spec.delegates and TASK_ALIASES.isdisjoint(disallowed),
        )
    return restricted


def _unasked(allowed: Sequence[str], permission_mode: str) -> list[str] | None:
    """The tool rules that run without asking, where nobody can be asked: the read-only
    tools, what ``--allowedTools`` names, the edits under ``acceptEdits``; None: every tool
    (no ``--allowedTools``, or ``bypassPermissions``)."""
    if not allowed or permission_mode == "bypassPermissions":
        return None
    edits = ["Write", "Edit"] if permission_mode == "acceptEdits" else []
    return [*_NEVER_ASKS, *(rule for rule in allowed if rule not in TASK_ALIASES), *edits]


def allowed_spec(allowed: Sequence[str]) -> AgentSpec:
    """What an agent may do without asking: the read-only tools and what the
    ``--allowedTools`` rules name (its ``bash_allow``: the commands they match)."""
    rules = [rule for rule in allowed if rule not in TASK_ALIASES]
    spec, _ = build_spec("", "", "", {"tools": [*_NEVER_ASKS, *rules]}, source="")
    return spec


def _both(agent: list[str], session: list[str]) -> list[str] | None:
    """The bash allow rules of an agent under the session's ([]: any command); None when
    no rule is in both."""
    if not agent or not session:
        return agent or session
    common = [rule for rule in agent if rule in session]
    return common or None


def parent_prompt(settings: Settings, default: str) -> str:
    """``--system-prompt`` replaces isoagent's prompt (and the settings' output style, which
    follows it), ``--append-system-prompt`` adds to it."""
    prompt = settings.system_prompt
    if not prompt:
        style = settings.output_style.prompt
        prompt = f"{default}\n\n{style}" if style else default
    if settings.append_system_prompt:
        prompt = f"{prompt}\n\n{settings.append_system_prompt}"
    return prompt


def latest_run(runs_dir: Path) -> str:
    """The id of the newest run with a parent conversation (``--continue``) among those this
    user's isoagent wrote; newer run folders it did not write are named in one line."""
    skipped = []
    for run in _runs_newest_first(runs_dir):
        events = sealed_events(run)
        if events is None:
            if (run / LOG).exists():
                skipped.append(run.name)
            continue
        if _conversation(events):
            if skipped:
                warn(f"warning: {_not_written(skipped, runs_dir)}")
            return run.name
    why = f" ({_not_written(skipped, runs_dir)})" if skipped else ""
    raise ResumeError(f"no earlier conversation to continue in {runs_dir}{why}")


NOT_WRITTEN = "was not written by this user's isoagent (no seal of the user's key)"


def _not_written(runs: list[str], runs_dir: Path) -> str:
    """One line naming the run folders passed over: their turns go nowhere."""
    named = ", ".join(runs[:3]) + (f" and {len(runs) - 3} more" if len(runs) > 3 else "")
    return (
        f"{plural(len(runs), 'run folder')} in {runs_dir} not written by this user's isoagent "
        f"(no seal of the user's key), passed over: {named}"
    )


def _runs_newest_first(runs_dir: Path) -> list[Path]:
    runs = [p for p in runs_dir.iterdir() if p.is_dir()] if runs_dir.is_dir() else []
    # newest first by when each was last written: run ids order by the second only
    return sorted(runs, key=_last_written, reverse=True)


def _last_written(run: Path) -> int:
    try:
        return (run / LOG).stat().st_mtime_ns
    except OSError:
        return 0


# Claude Code's words for a turn its user interrupted: in its tools, or while its model answered
INTERRUPTED = "[Request interrupted by user for tool use]"
INTERRUPTED_ANSWER = "[Request interrupted by user]"


def earlier_conversation(runs_dir: Path, run_id: str) -> list[Message]:
    """The parent's conversation in run ``run_id`` ([] for ""), to go on with: only what
    this user's isoagent sealed."""
    if not run_id:
        return []
    if "/" in run_id or run_id in (".", "..") or not (runs_dir / run_id).is_dir():
        raise ResumeError(f"no run {run_id!r} in {runs_dir}")
    events = sealed_events(runs_dir / run_id)
    if events is None:
        raise ResumeError(f"run {run_id!r} in {runs_dir} {NOT_WRITTEN}: not continued")
    messages = _conversation(events)
    if not messages:
        raise ResumeError(f"run {run_id!r} has no conversation to continue")
    return go_on_from(messages)


def conversation_in(transcript: Path, child: str = "") -> list[Message]:
    """The messages of ``child``'s conversation ("": the parent's) in a transcript the
    parent wrote in this session's run folder."""
    return _conversation(read_events(transcript), child)


def _conversation(events: list[AnyEvent], child: str = "") -> list[Message]:
    return [
        Message(event.role, event.content)  # type: ignore[arg-type]
        for event in events
        if isinstance(event, MessageAdded) and event.child == child
    ]


def go_on_from(messages: list[Message]) -> list[Message]:
    """A conversation to go on with. A turn cut off (an interrupt, an error) stays in it,
    as in Claude Code: tool calls it left unanswered are answered as interrupted, and a
    prompt the model never answered is kept (the API joins it with the next one)."""
    if unanswered := _unanswered(messages):
        return [*messages, Message("user", list(_interrupted(unanswered)))]
    return messages


def interrupted_turn(messages: list[Message], answering: bool) -> Message:
    """The user message that closes a turn the SDK's interrupt cut, as Claude Code keeps
    it: the tool calls it left unanswered answered as interrupted, and its words for it
    (``answering``: the model was answering, not a tool running)."""
    if unanswered := _unanswered(messages):
        return Message("user", [*_interrupted(unanswered), TextBlock(INTERRUPTED)])
    return Message("user", [TextBlock(INTERRUPTED_ANSWER if answering else INTERRUPTED)])


def _unanswered(messages: list[Message]) -> list[ToolUseBlock]:
    """The tool calls of a conversation's last message, if it is the model's."""
    last = messages[-1] if messages else None
    if last is None or last.role != "assistant":
        return []
    return [b for b in last.content if isinstance(b, ToolUseBlock)]


def _interrupted(uses: list[ToolUseBlock]) -> list[ToolResultBlock]:
    return [ToolResultBlock(use.id, INTERRUPTED, is_error=True) for use in uses]
