"""MCP servers for subagents, as Claude Code configures them.

The servers come from the workspace's ``.mcp.json`` (unless ``--strict-mcp-config``) and
from each ``--mcp-config`` (a JSON object or a file holding one), later ones winning:
``{"mcpServers": {"ctx": {"command": "...", "args": [...], "env": {...}}}}``.

A child gets a server's tools when its agent's ``tools`` names them (``mcp__ctx__lookup``,
or ``mcp__ctx`` for all of them), or when its agent's ``mcpServers`` lists the server (by
name, or inline: a server of that agent alone, ``AgentSpec.mcp_servers``) and it has no
``tools`` allow-list; it starts the server itself, inside its sandbox, and the server ends
with it. An http or sse server is reached through the egress proxy (``--child-network
on``); without network, or of another type (an SDK's in-process server), a server is
named, with the reason, when an agent asks for it.

The parent agent gets every tool of the stdio and SDK servers (``for_parent``), as Claude
Code's main agent does; its grants are Claude Code's (see ``parent_agent.parent_mcp_tools``).

A server gets no variable of the parent's environment but those its entry names, as Claude
Code expands them: ``"env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}`` (``${VAR:-default}`` too,
in ``command``, ``args``, ``env``, ``url`` and ``headers``); it starts with the allow-list
every process of isoagent's has (``identity.allowed_environment``), and a server the parent
starts gets its ``env`` only inside its sandbox (``confine_command.confined_env``). A
workspace's ``.mcp.json`` is read only once the workspace is trusted (``trust/``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from isoagent.protocol import AgentSpec, McpServer

PROJECT_FILE = ".mcp.json"
KINDS = ("stdio", "http", "sse")  # the types a child can reach (http and sse: with network)
SDK_ONLY = "its type is sdk: an SDK's in-process server is reached only from the SDK"
# (server, tool, arguments) -> (text, is_error): a call of an SDK server's tool, blocking
SdkRelay = Callable[[str, str, dict[str, Any]], tuple[str, bool]]
PREFIX = "mcp__"
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# Claude Code's rule for a server's name (`claude mcp add`); "__" would split a tool's name
_NAME = re.compile(r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$")


_EXPANDED = frozenset({"command", "args", "env", "url", "headers"})


class McpServers:
    """The servers a run may start, by name, and those it cannot (name -> why); ``failed``:
    those of them a ``--mcp-config`` gave (the SDK's ``mcp_servers``), not a workspace's
    ``.mcp.json``: ``isoagent -p`` names each on stderr and runs on, as Claude Code does."""

    def __init__(
        self,
        servers: Mapping[str, McpServer] | None = None,
        unusable: Mapping[str, str] | None = None,
        given: Sequence[str] = (),
        relay: SdkRelay | None = None,
        disabled: frozenset[str] = frozenset(),
        started: dict[str, str] | None = None,
    ) -> None:
        self.servers = dict(servers or {})
        # the servers the parent agent started, by name: "" if it could, else why not (the
        # session's one record, shared by these servers' every later form)
        self.started: dict[str, str] = {} if started is None else started
        self.disabled = disabled  # turned off by the SDK's toggle_mcp_server: no child gets it
        self.unusable = dict(unusable or {})
        self.given = tuple(given)  # the names a --mcp-config gave
        self.failed = {name: self.unusable[name] for name in given if name in self.unusable}
        self.relay = relay  # calls the tools of the SDK's servers (type sdk)

    @property
    def sdk_names(self) -> list[str]:
        """The SDK's in-process servers not listed yet (``with_sdk``)."""
        return [name for name, why in self.unusable.items() if why == SDK_ONLY]

    def offline(self) -> McpServers:
        """These servers for children without network: http and sse ones unusable."""
        remote = {name for name, s in self.servers.items() if s.type in ("http", "sse")}
        why = "an http or sse server needs --child-network on"
        return McpServers(
            {name: server for name, server in self.servers.items() if name not in remote},
            {**self.unusable, **dict.fromkeys(remote, why)},
            self.given,
            self.relay,
            self.disabled,
            self.started,
        )

    def toggled(self, name: str, enabled: bool) -> McpServers:
        """These servers with ``name`` turned on or off (``ValueError``: no such server)."""
        if name not in self.servers and name not in self.unusable:
            raise ValueError(f"no MCP server {name!r}")
        disabled = self.disabled - {name} if enabled else self.disabled | {name}
        return McpServers(
            self.servers, self.unusable, self.given, self.relay, disabled, self.started
        )

    def with_sdk(self, listed: Mapping[str, McpServer | str], relay: SdkRelay) -> McpServers:
        """With the SDK's servers listed (a server, or why it could not be listed), their
        tools called through ``relay``."""
        servers = {k: v for k, v in listed.items() if isinstance(v, McpServer)}
        failed = {k: v for k, v in listed.items() if isinstance(v, str)}
        unusable = {k: v for k, v in self.unusable.items() if k not in listed}
        return McpServers(
            {**self.servers, **servers}, {**unusable, **failed}, self.given, relay,
            self.disabled, self.started,
        )  # fmt: skip

    def status(self, *, sdk: bool = False) -> list[dict[str, str]]:
        """Each server as Claude Code's ``init`` and ``get_mcp_status`` list it. A stdio or
        http server is ``pending`` until the parent has started it with its turn (after
        ``init``), then ``connected``, or ``failed`` with why (a child starts those its
        agent uses on its own); an SDK server whose tools were listed is ``connected`` (one
        not listed yet is ``pending`` while the ``sdk`` is there to list it); one no child
        can use is ``failed``, with the reason."""
        # by name: None while pending, "" once up (connected), else why it failed
        reasons = {
            name: "" if server.type == "sdk" else self.started.get(name)
            for name, server in self.servers.items()
        }
        reasons |= {n: None if sdk and why == SDK_ONLY else why for n, why in self.unusable.items()}
        listed = []
        for name, why in reasons.items():
            status = "pending" if why is None else "failed" if why else "connected"
            status = "disabled" if name in self.disabled else status
            source = "dynamic" if name in self.given else "project"  # as Claude Code says
            entry = {"name": name, "status": status, "source": source}
            listed.append(entry | {"error": why} if status == "failed" and why else entry)
        return listed

    def for_parent(self) -> tuple[list[McpServer], dict[str, str]]:
        """The servers (on) whose tools the parent agent gets, and those (name -> why) it
        cannot use: an http or sse one, which the parent process would reach unfiltered
        (the egress proxy serves the children's namespaces alone)."""
        on = [server for name, server in self.servers.items() if name not in self.disabled]
        remote = {s.name for s in on if s.type in ("http", "sse")}
        why = "the parent agent reaches no http or sse server (a subagent does, with network)"
        return [s for s in on if s.name not in remote], dict.fromkeys(remote, why)

    def for_agent(self, agent: AgentSpec) -> list[McpServer]:
        """The servers whose tools ``agent`` names, in the order it names them: its own
        (inline in its ``mcpServers``) before the run's of the same name."""
        names = dict.fromkeys(server_of(tool) for tool in agent.mcp_tools)
        servers = {**self.servers, **{server.name: server for server in agent.mcp_servers}}
        return [servers[name] for name in names if name in servers and name not in self.disabled]

    def problems(self, agents: Iterable[AgentSpec]) -> list[str]:
        """One line for every server agents name that cannot be started, by reason."""
        wanted: dict[str, list[str]] = {}
        for agent in agents:
            own = {server.name for server in agent.mcp_servers}
            for name in dict.fromkeys(server_of(tool) for tool in agent.mcp_tools):
                if name not in self.servers and name not in own:
                    wanted.setdefault(name, []).append(agent.name)
        by_reason: dict[str, list[str]] = {}
        for name, names in sorted(wanted.items()):
            why = self.unusable.get(name, f"no {PROJECT_FILE} or --mcp-config defines it")
            count = f"{len(names)} agents" if len(names) > 1 else f"agent {names[0]}"
            by_reason.setdefault(why, []).append(f"{name} ({count})")
        return [
            f"MCP servers left out ({why}): {', '.join(servers)}"
            for why, servers in by_reason.items()
        ]


def strict_agents(agents: Mapping[str, AgentSpec]) -> tuple[dict[str, AgentSpec], list[str]]:
    """``--strict-mcp-config``: the agents without the servers agent files define inline, as
    Claude Code leaves them out (not ``--agents`` JSON's: the caller's own input); and one
    line naming those left out, if any."""
    kept = without_own_servers(agents, lambda agent: agent.source != "--agents")
    dropped = [
        f"{server.name} (agent {agent.name})"
        for key, agent in agents.items()
        if kept[key] is not agent
        for server in sorted(agent.mcp_servers, key=lambda s: s.name)
    ]
    why = "--strict-mcp-config: an agent file's own servers do not run"
    return kept, [f"MCP servers left out ({why}): {', '.join(dropped)}"] if dropped else []


def without_own_servers(
    agents: Mapping[str, AgentSpec], drop: Callable[[AgentSpec], bool]
) -> dict[str, AgentSpec]:
    """``agents``, those ``drop`` says without the servers they define inline (and their
    grants of those servers' tools); the others as they are."""
    kept: dict[str, AgentSpec] = {}
    for key, agent in agents.items():
        if not agent.mcp_servers or not drop(agent):
            kept[key] = agent
            continue
        own = {server.name for server in agent.mcp_servers}
        tools = [tool for tool in agent.mcp_tools if server_of(tool) not in own]
        kept[key] = msgspec.structs.replace(agent, mcp_servers=[], mcp_tools=tools)
    return kept


def whole_server(tool: str) -> str:
    """``mcp__ctx__*`` -> ``mcp__ctx``: Claude Code's wildcard for every tool of a server,
    spelt as isoagent's grant for it; any other name as it is."""
    return tool.removesuffix("__*") if tool.startswith(PREFIX) else tool


def server_of(tool: str) -> str:
    """``mcp__ctx__lookup`` and ``mcp__ctx`` -> ``ctx``."""
    return tool.removeprefix(PREFIX).split("__", 1)[0]


def load(
    configs: Sequence[str], project: tuple[str, str] | None = None, refused: Iterable[str] = ()
) -> McpServers:
    """The servers of ``project`` (a trusted ``.mcp.json``: its path, its text) but those
    ``refused`` names (Claude Code's ``disabledMcpjsonServers``), and of ``configs``; a file or
    value that is not such JSON is a ``ValueError`` naming it."""
    sources: list[tuple[str, str]] = [project] if project is not None else []
    for config in configs:
        text = config.strip()
        if text.startswith("{"):
            sources.append(("--mcp-config", text))
        else:
            try:
                sources.append((config, Path(config).read_text(encoding="utf-8")))
            except OSError as exc:
                raise ValueError(f"--mcp-config {config}: {exc.strerror}") from None
    servers: dict[str, McpServer] = {}
    unusable: dict[str, str] = {}
    given: list[str] = []
    for where, text in sources:
        for name, entry in _entries(where, text).items():
            ours = project is not None and where == project[0]
            if ours and name in refused:
                continue
            servers.pop(name, None)
            unusable.pop(name, None)
            if not ours:
                given.append(name)
            kind = entry.get("type", "stdio")
            if kind == "sdk":
                unusable[name] = SDK_ONLY
                continue
            if kind not in KINDS:
                unusable[name] = f"its type is {kind}; isoagent's children reach only " + (
                    "stdio, http and sse servers"
                )
                continue
            servers[name] = _server(where, name, entry)
    return McpServers(servers, unusable, given)


def agent_entry(entry: object) -> tuple[str, McpServer | None]:
    """One item of an agent's ``mcpServers``: a server's name (``"ctx"``: one the run
    configures), or a server of the agent's own (``{"ctx": {"command": ...}}``, an
    ``.mcp.json`` entry); its name, and the server if inline. A ``ValueError`` says what is
    wrong, or that an inline server is not stdio (isoagent's children start no other)."""
    if isinstance(entry, str):
        name, config = entry.strip(), None
    elif isinstance(entry, dict) and len(entry) == 1:
        [(name, config)] = entry.items()
        if not isinstance(name, str) or not isinstance(config, dict):
            raise ValueError(f"mcpServers: {name!r} must map to a server's settings")
    else:
        raise ValueError(
            "mcpServers: each entry is a server's name or {name: {command, args, env}}"
        )
    if not _NAME.match(name):
        why = "letters, digits, hyphens and single underscores only"
        raise ValueError(f"mcpServers: {name!r} is not a server name ({why})")
    if config is None:
        return name, None
    kind = config.get("type", "stdio")
    if kind not in KINDS:
        raise ValueError(
            f"mcpServers: server {name!r} is of type {kind}; "
            "isoagent's children reach only stdio, http and sse servers"
        )
    return name, _server("mcpServers", name, config)


def _entries(where: str, text: str) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not JSON: {exc}") from None
    entries = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(entries, dict) or not all(isinstance(e, dict) for e in entries.values()):
        raise ValueError(f'{where} holds no {{"mcpServers": {{name: {{...}}}}}} object')
    return entries


def expand(value: Any, environ: Mapping[str, str] = os.environ) -> Any:
    """``value`` (a string, or strings in a list or an object) with each ``${VAR}`` and
    ``${VAR:-default}`` replaced from ``environ``, as Claude Code expands ``.mcp.json``; a
    ``ValueError`` names one that is not set and has no default (Claude Code refuses such a
    config too)."""
    if isinstance(value, list):
        return [expand(item, environ) for item in value]
    if isinstance(value, dict):
        return {key: expand(item, environ) for key, item in value.items()}
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is None:
            raise ValueError(f"${{{name}}} is not set and has no default")
        return default

    return _VARIABLE.sub(one, value)


def _server(where: str, name: str, entry: Mapping[str, Any]) -> McpServer:
    """One server's entry, of a type in ``KINDS``, its variables expanded; a ``ValueError``
    says what is wrong."""
    try:
        entry = {key: expand(entry[key]) if key in _EXPANDED else entry[key] for key in entry}
    except ValueError as exc:
        raise ValueError(f"{where}: MCP server {name!r}: {exc}") from None
    kind = entry.get("type", "stdio")
    if kind == "stdio":
        return _stdio(where, name, entry)
    url, headers = entry.get("url"), entry.get("headers", {})
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"{where}: MCP server {name!r} has no http(s) url")
    if not (isinstance(headers, dict) and all(isinstance(v, str) for v in headers.values())):
        raise ValueError(f"{where}: MCP server {name!r}: headers is not an object of strings")
    return McpServer(name, type=kind, url=url, headers=headers)


def _stdio(where: str, name: str, entry: Mapping[str, Any]) -> McpServer:
    command, args, env = entry.get("command"), entry.get("args", []), entry.get("env", {})
    if not isinstance(command, str) or not command:
        raise ValueError(f"{where}: MCP server {name!r} has no command")
    if not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
        raise ValueError(f"{where}: MCP server {name!r}: args is not a list of strings")
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        raise ValueError(f"{where}: MCP server {name!r}: env is not an object of strings")
    return McpServer(name, command, args, env)
