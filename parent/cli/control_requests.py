"""The claude-agent-sdk's control requests and isoagent's answers: ``initialize`` (agent
types, hook callbacks), ``set_model``, ``set_permission_mode``, ``mcp_status``,
``get_context_usage``, ``mcp_toggle``, ``interrupt``, ``stop_task``; anything else is refused
by name, so the SDK never waits for an answer that does not come."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from isoagent.parent.cli.sdk_channel import Inbox, respond
from isoagent.parent.settings import Settings

# the permission modes, and how much each lets run unasked where --allowedTools names what does
_WIDTH = {"default": 1, "acceptEdits": 2, "plan": 0, "bypassPermissions": 3, "dontAsk": 1,
          "auto": 1}  # fmt: skip
PERMISSION_MODES = list(_WIDTH)


def _mcp_status(settings: Settings, inbox: Inbox) -> dict[str, Any]:
    """``get_mcp_status``: the session's servers (an SDK's not yet listed before a run)."""
    return {"mcpServers": settings.mcp_servers.status(sdk=not inbox.running.is_set())}


def _context_usage(settings: Settings, inbox: Inbox) -> dict[str, Any]:
    """``get_context_usage``: the parent's context as the API counted it at its last
    answer (system prompt, tools and messages: isoagent does not count them apart)."""
    betas = settings.call_options.betas if settings.call_options is not None else ()
    window = 1_000_000 if any("context-1m" in beta for beta in betas) else 200_000
    used = inbox.context_tokens
    return {
        "categories": [
            {"name": "Context, as the API counted it", "tokens": used, "color": "claude"},
            {"name": "Free space", "tokens": max(window - used, 0), "color": "promptBorder"},
        ],
        "totalTokens": used, "maxTokens": window, "rawMaxTokens": window,
        "percentage": round(100 * used / window, 1), "model": settings.model,
        "isAutoCompactEnabled": False, "memoryFiles": [], "mcpTools": [], "gridRows": [],
        "agents": [{"agentType": name, "source": a.source} for name, a in settings.agents.items()],
    }  # fmt: skip


# control requests that have nothing to act on in isoagent, and why (README: the SDK)
_NOTHING_TO_DO = {
    "rewind_files": "isoagent keeps no file checkpoints to rewind to: a writing child "
    "changes the workspace itself, as Claude Code's tools do without checkpointing; use git",
    "mcp_reconnect": "isoagent's parent holds no MCP connection to renew: each turn of the "
    "parent and each child starts the servers it uses, so the next one tries a failed server "
    "again",
}

# control requests answered during a run as between runs
_ANY_TIME: dict[str, Callable[[Settings, Inbox], dict[str, Any]]] = {
    "mcp_status": _mcp_status,
    "get_context_usage": _context_usage,
}


def answer(message: dict[str, Any], settings: Settings, inbox: Inbox) -> Settings:
    """Claude Code's reply to a control request: ``initialize`` succeeds (adding the agent
    types and the hook callbacks it carries) unless it registers a hook isoagent cannot run
    (a hook meant to block a tool call must not be ignored) or asks for skills;
    ``set_model`` sets the next run's model; anything else is refused by name, so the SDK
    does not wait for an answer that never comes. The settings the session runs with."""
    from isoagent.parent.agent.parent_agent import restrict_agents
    from isoagent.parent.claude_code.agent_files import inline_agents
    from isoagent.parent.model.aliases import resolve_model
    from isoagent.parent.options import default_model

    request = message.get("request")
    request = request if isinstance(request, dict) else {}
    subtype = request.get("subtype")
    error = f"isoagent does not support the control request {subtype!r}"
    if subtype == "initialize" and request.get("hooks"):
        from isoagent.parent.agent.hooks import Hooks, UnsupportedHook

        try:
            hooks = (settings.hooks or Hooks()).with_sdk(request["hooks"], inbox.hook_callback)
        except (ValueError, UnsupportedHook) as exc:
            subtype, error = None, f"hooks are not supported: {exc}"
        else:
            settings = dataclasses.replace(settings, hooks=hooks)
    if subtype == "initialize":
        inbox.forward_subagent_text = bool(request.get("forwardSubagentText"))
    if subtype == "initialize" and request.get("skills"):
        subtype, error = None, "skills is not supported: isoagent has no skills"
    if subtype == "set_model":  # for the next message's run, as in Claude Code
        settings = dataclasses.replace(
            settings, model=resolve_model(str(request.get("model") or default_model()))
        )
        if not message.get("answered"):
            respond(message, {}, "")
        return settings
    if subtype in _ANY_TIME:
        respond(message, _ANY_TIME[subtype](settings, inbox), "")
        return settings
    if subtype == "mcp_toggle":
        try:
            servers = settings.mcp_servers.toggled(
                str(request.get("serverName")), bool(request.get("enabled"))
            )
        except ValueError as exc:
            subtype, error = None, str(exc)
        else:
            respond(message, {}, "")
            return dataclasses.replace(settings, mcp_servers=servers)
    error = _NOTHING_TO_DO.get(str(subtype), error)
    if subtype == "stop_task":  # between runs
        error = f"no task {str(request.get('task_id'))!r} is running"
    if subtype == "set_permission_mode":
        mode = str(request.get("mode", ""))
        try:
            settings = _with_permission_mode(settings, mode)
        except ValueError as exc:
            subtype, error = None, str(exc)
        else:
            respond(message, {}, "")
            return settings
    if subtype == "initialize" and request.get("agents"):
        try:
            added = inline_agents(json.dumps(request["agents"]))
        except ValueError as exc:
            subtype, error = None, f"invalid agents: {exc}"
        else:  # under the session's --disallowedTools, --allowedTools and plan mode too
            added = restrict_agents(
                added,
                settings.disallowed_tools,
                settings.permission_mode,
                settings.allowed_tools,
                settings.tools,
            )
            settings = dataclasses.replace(settings, agents={**settings.agents, **added})
    if subtype == "initialize":
        from isoagent.parent.claude_code.slash_commands import listed

        answer = {"commands": listed(inbox.commands or {}),
                  "output_style": settings.output_style.name, "models": [], "account": {},
                  "hook_on_failure_supported": True}  # fmt: skip
        respond(message, answer, "")
    else:
        respond(message, None, error)
    return settings


def _with_permission_mode(settings: Settings, mode: str) -> Settings:
    """``settings`` in permission ``mode`` from the next run on (``set_permission_mode``).
    Agent types are narrowed to it; one that would widen them (out of plan mode, or to
    more than ``--allowedTools`` gave) is a ``ValueError``: what they lost is not kept."""
    from isoagent.parent.agent.parent_agent import restrict_agents

    if mode not in _WIDTH:
        raise ValueError(f"unknown permission mode {mode!r}")
    now = _WIDTH.get(settings.permission_mode, 1)
    wider = _WIDTH[mode] > now if settings.allowed_tools else now == 0 and mode != "plan"
    if wider:
        raise ValueError(
            f"isoagent cannot widen a session from {settings.permission_mode} to {mode}: "
            "start a new session in that mode"
        )
    agents = restrict_agents(
        settings.agents, settings.disallowed_tools, mode, settings.allowed_tools, settings.tools
    )
    return dataclasses.replace(settings, permission_mode=mode, agents=agents)


def answer_during_run(inbox: Inbox, message: dict[str, Any]) -> None:
    """A control request that comes while a run is going, answered at once: ``interrupt``
    ends the parent's turn at its next step and the children running (see
    ``Session.interrupt``); ``set_model`` is queued for the next run."""
    request = message.get("request")
    if isinstance(request, dict) and request.get("subtype") == "interrupt":
        inbox.interrupted_upto = inbox.prompts_read  # before the run is asked (interrupted)
        if inbox.interrupt is not None:
            inbox.interrupt()
        respond(message, {}, "")
    elif isinstance(request, dict) and request.get("subtype") == "stop_task":
        task = str(request.get("task_id"))
        if inbox.stop_task is not None and inbox.stop_task(task):
            respond(message, {}, "")
        else:
            respond(message, None, f"no task {task!r} is running")
    elif isinstance(request, dict) and request.get("subtype") in _ANY_TIME:
        assert inbox.settings is not None  # set before a run starts
        respond(message, _ANY_TIME[request["subtype"]](inbox.settings, inbox), "")
    elif isinstance(request, dict) and request.get("subtype") == "set_model":
        respond(message, {}, "")  # the next run's model: set when this one ends
        inbox._queue.put({**message, "answered": True})
    else:
        respond(message, None, "isoagent cannot do this while a run is going")
