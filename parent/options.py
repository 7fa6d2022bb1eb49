"""``Options``: what a caller sets, typed, with the CLI's defaults; ``settings_for`` makes
them the one ``Settings`` a ``Session`` runs with.

This is the core the Python API (``isoagent.task(..., options=Options(...))``) and the
click commands share: a command builds ``Options`` from its flags and calls the same
``settings_for``. Adding an option: a field here (with its default and a comment), what
it becomes in ``settings_for`` (a ``Settings`` field, usually of the same name), then its
flag in ``parent/cli/options.py`` (the flag's default comes from here).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import shlex
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from isoagent.errors import OptionError
from isoagent.parent.children.hosts import HostSpecError, RemoteSettings, parse_hosts
from isoagent.parent.claude_code import mcp_servers
from isoagent.parent.model.aliases import resolve_model
from isoagent.parent.records.run_folder import RUNS, runs_dir_for
from isoagent.parent.records.terminal_text import warn
from isoagent.parent.settings import (
    DEFAULT_MODEL,
    ChildNetwork,
    ReplayMatch,
    SandboxChoice,
    Settings,
)
from isoagent.parent.typed_values import conforms, describe, literals
from isoagent.protocol import CallOptions, Limits

MODEL_VARIABLES = ("ISOAGENT_MODEL", "ANTHROPIC_MODEL")  # the model, when none is given
_LIMITS = Settings(workdir=Path(".")).limits
_REMOTE = RemoteSettings(hosts=())
_BATCH_WINDOW = Settings.batch_window


@dataclass(frozen=True, kw_only=True)
class AgentDefinition:
    """An agent type defined in code, as Claude Code's ``--agents`` JSON defines one."""

    description: str  # when the parent should use it
    prompt: str  # its system prompt
    tools: Sequence[str] | None = None  # Claude Code tool names ("Read", "Bash(git:*)"); None: all
    disallowed_tools: Sequence[str] = ()
    model: str | None = None  # an alias (sonnet, haiku, ...) or an id; None: the parent's
    max_turns: int | None = None
    permission_mode: str | None = None  # "plan": read-only
    # MCP servers: a name of one the run configures, or {name: {command, args, env}} its own
    mcp_servers: Sequence[str | Mapping[str, Mapping[str, Any]]] = ()
    background: bool = False  # its children run in the background

    def __post_init__(self) -> None:
        _check_types(self, "AgentDefinition")

    def as_claude_json(self) -> dict[str, Any]:
        """The definition in ``--agents`` JSON's names."""
        fields = {
            "description": self.description,
            "prompt": self.prompt,
            "tools": None if self.tools is None else list(self.tools),
            "disallowedTools": list(self.disallowed_tools) or None,
            "model": self.model,
            "maxTurns": self.max_turns,
            "permissionMode": self.permission_mode,
            "mcpServers": [s if isinstance(s, str) else dict(s) for s in self.mcp_servers] or None,
            "background": self.background or None,
        }
        return {key: value for key, value in fields.items() if value is not None}


@dataclass(frozen=True, kw_only=True)
class Options:
    """Everything a run can be set to; each default is the CLI's."""

    workdir: str | Path = "."  # the workspace the agents work in
    model: str | None = None  # an id or alias; None: $ISOAGENT_MODEL, $ANTHROPIC_MODEL, sonnet
    max_turns: int = 0  # per agent; 0: none (an agent file's maxTurns wins)
    add_dirs: Sequence[str | Path] = ()  # more folders the agents use as the workspace
    timeout: float = 600.0  # wall-clock seconds per child
    max_parallel: int | None = None  # children at once; None: 4, or the hosts' slots
    max_depth: int = 1  # levels of children: 2, an all-tools child may start its own
    agents_dirs: Sequence[str | Path] = ()  # more folders of agent files
    agents: Mapping[str, AgentDefinition | Mapping[str, Any]] | None = None  # more agent types
    verbose: bool = False
    # the children's sandbox and limits (0: no limit)
    sandbox: SandboxChoice = "auto"
    allow_unsandboxed: bool = False  # run read-only agents unconfined without Landlock
    writable_git: bool = False  # writing agents may change .git
    # off: children have no network; on: through the parent's proxy, to allowed_domains
    # at public addresses; host: the host's network, directly, unfiltered
    child_network: ChildNetwork = "off"
    allowed_domains: str | Sequence[str] = ()  # "example.com", "*.example.com"; implies "on"
    deny_read: Sequence[str | Path] = ()  # more paths children may not read (~/.ssh, ...: always)
    # where run folders go; None: $ISOAGENT_RUN_DIR, else <workdir>/.isoagent/runs, else
    # (a read-only workspace) $XDG_STATE_HOME/isoagent/runs
    run_dir: str | Path | None = None
    local_fetch_hosts: Sequence[str] = ()  # web_fetch may reach these on private addresses
    max_tokens_total: int = 0  # the run's token budget
    api_retry_deadline: float = 600.0  # seconds a refused or failed model call is retried
    cpu_seconds: int = _LIMITS.cpu_seconds
    memory_mb: int = _LIMITS.address_space_mb
    max_processes: int = _LIMITS.max_processes
    max_file_size_mb: int = _LIMITS.file_size_mb
    child_disk_mb: int = Settings.child_disk_mb  # what the parent writes for one child
    # children on other hosts (see ``isoagent run --help``)
    hosts: str | None = None  # name[:slots],... or @FILE
    launcher: str = _REMOTE.launcher
    remote_python: str = _REMOTE.remote_python
    remote_workdir: str | None = None
    heartbeat: float = _REMOTE.heartbeat
    retries: int = _REMOTE.retries
    retry_crashed: bool = False
    launch_timeout: float = _REMOTE.launch_timeout
    # model calls from and to files
    record: str | Path | None = None
    replay: str | Path | None = None
    replay_match: ReplayMatch = "strict"
    # the parent agent, as Claude Code's flags set it
    system_prompt: str = ""
    append_system_prompt: str = ""
    allowed_tools: str | Sequence[str] = ()
    disallowed_tools: str | Sequence[str] = ()
    permission_mode: Literal["default", "acceptEdits", "bypassPermissions", "plan"] = "default"
    continue_conversation: bool = False  # continue the latest run's conversation
    resume: str | None = None  # a session id (run id) whose conversation to continue
    tools: str | Sequence[str] | None = None  # the base tools (Claude Code names), children's too
    # whose agent files: None, all
    setting_sources: Sequence[Literal["user", "project", "local"]] | None = None
    max_budget_usd: float = 0.0  # US dollars the run's model calls may cost; 0: no limit
    json_schema: Mapping[str, Any] | None = None  # the parent's answer as JSON of this schema
    fallback_model: str | None = None  # an id or alias: used when the model is overloaded
    session_id: str | None = None  # a UUID for the run's session (default: its run id)
    fork_session: bool = False  # resume or continue as a new session, not the earlier one's
    # the parent's model calls, as Claude Code's flags set them
    effort: Literal["low", "medium", "high", "max"] | None = None
    thinking: Literal["adaptive", "disabled"] | None = None
    max_thinking_tokens: int | None = None  # thinking with this budget (0: none)
    thinking_display: str | None = None
    task_budget: int | None = None  # tokens the model is told it has for the task
    betas: str | Sequence[str] = ()  # anthropic-beta headers
    # MCP servers for subagents: JSON objects or files ({"mcpServers": {...}}), besides the
    # workspace's .mcp.json unless strict (see mcp_servers)
    mcp_config: Sequence[str] = ()
    strict_mcp_config: bool = False
    # a batch's model calls as Message Batches, at half price (``isoagent.batch``, ``batch``)
    api_batches: bool = False
    batch_window: float = _BATCH_WINDOW  # seconds a call waits for others to join its batch

    def __post_init__(self) -> None:
        _check_values(self)

    def replace(self, **changes: Any) -> Options:
        """A copy with ``changes``, checked as ``Options(...)`` checks its values."""
        _check_names(changes)
        return dataclasses.replace(self, **changes)


OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(Options))
_checked_init = Options.__init__


@functools.wraps(_checked_init)
def _init(self: Options, *args: Any, **values: Any) -> None:
    _check_names(values)
    _checked_init(self, *args, **values)


Options.__init__ = _init  # type: ignore[method-assign]  # a misspelt name: did you mean


def _check_names(values: Mapping[str, Any]) -> None:
    """An ``OptionError`` for the first name that is no option, with the nearest one."""
    for name in sorted(set(values) - OPTION_NAMES):
        raise OptionError(f"unknown option {name!r}{_did_you_mean(name, OPTION_NAMES)}")


def _did_you_mean(word: Any, choices: Iterable[Any]) -> str:
    if not isinstance(word, str):
        return ""
    near = difflib.get_close_matches(word, [c for c in choices if isinstance(c, str)], n=1)
    return f"; did you mean {near[0]!r}?" if near else ""


_FIELD_TYPES: dict[type, dict[str, Any]] = {}  # each class's, resolved once


def _field_types(cls: type) -> dict[str, Any]:
    if cls not in _FIELD_TYPES:
        _FIELD_TYPES[cls] = typing.get_type_hints(cls)
    return _FIELD_TYPES[cls]


def _check_types(made: Options | AgentDefinition, what: str) -> None:
    """An ``OptionError`` naming the first field of ``made`` whose value is not of its
    type, and what it may be."""
    for name, hint in _field_types(type(made)).items():
        value = getattr(made, name)
        if not conforms(value, hint):
            raise OptionError(
                f"invalid {what} {name}={value!r}: it must be {describe(hint)}"
                + _did_you_mean(value, literals(hint))
            )


def _check_values(options: Options) -> None:
    """``_check_types``, then an ``OptionError`` for a value out of its range or a path
    that is not there."""
    _check_types(options, "option")
    for name, least in _AT_LEAST.items():
        value = getattr(options, name)
        if value is not None and not value >= least:  # NaN is not
            raise OptionError(f"{_invalid(name, value)}: it must be at least {least}")
    if not Path(options.workdir).is_dir():
        raise OptionError(f"{_invalid('workdir', options.workdir)}: it is not a folder")
    try:
        added_dirs(options.add_dirs)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    if options.replay is not None and not Path(options.replay).is_file():
        raise OptionError(f"{_invalid('replay', options.replay)}: there is no such file")


def _invalid(name: str, value: Any) -> str:
    return f"invalid option {name}={value!r}"


_AT_LEAST = {
    "max_turns": 0, "timeout": 1, "max_parallel": 1, "max_tokens_total": 0, "cpu_seconds": 0,
    "max_depth": 1, "max_budget_usd": 0, "max_thinking_tokens": 0, "task_budget": 1,
    "api_retry_deadline": 1, "batch_window": 0,
    "memory_mb": 0, "max_processes": 0, "max_file_size_mb": 0, "child_disk_mb": 0,
    "heartbeat": 0.1, "retries": 0,
    "launch_timeout": 1,
}  # fmt: skip


def settings_for(options: Options, on_warning: Any = None) -> Settings:
    """The ``Settings`` of a run with ``options``: agent files read, models resolved, paths
    checked. A ``ValueError`` says in one line what cannot be used. ``on_warning`` is told
    each problem with an agent file (they are never fatal), and (default: on stderr) that
    the run folders go to the state folder."""
    from isoagent.parent.agent.parent_agent import claude_settings
    from isoagent.parent.agent.structured_output import check_schema

    workdir = Path(os.path.realpath(options.workdir))
    if not workdir.is_dir():
        raise ValueError(f"the workspace {options.workdir} is not a folder")
    remote = remote_settings(options)
    max_parallel = options.max_parallel
    if max_parallel is None:  # the pool's slots say how many at once
        max_parallel = remote.slots if remote is not None else Settings.max_parallel
    run_base, moved = runs_dir_for(workdir, options.run_dir)
    if moved:
        (on_warning or warn)(
            f"cannot create run folders in {workdir / RUNS}: they go to {run_base} "
            "(--run-dir chooses where)"
        )
    model = options.model or default_model()
    fallback = resolve_model(options.fallback_model) if options.fallback_model else ""
    if fallback == resolve_model(model):
        raise ValueError(f"the fallback model {fallback} is the model itself")
    settings = Settings(
        workdir=workdir,
        add_dirs=added_dirs(options.add_dirs),
        model=resolve_model(model),
        fallback_model=fallback,
        session_id=options.session_id or "",
        fork_session=options.fork_session,
        call_options=call_options(options),
        limits=Limits(
            max_turns=options.max_turns,
            cpu_seconds=options.cpu_seconds,
            address_space_mb=options.memory_mb,
            max_processes=options.max_processes,
            file_size_mb=options.max_file_size_mb,
        ),
        timeout=options.timeout,
        child_disk_mb=options.child_disk_mb,
        max_parallel=max_parallel,
        max_depth=options.max_depth,
        max_tokens_total=options.max_tokens_total,
        api_retry_deadline=options.api_retry_deadline,
        sandbox=options.sandbox,
        child_network=child_network(
            options.child_network, options.allowed_domains, remote is not None
        ),
        allowed_domains=tuple(" ".join(_words(options.allowed_domains)).replace(",", " ").split()),
        deny_read=tuple(Path(os.path.expanduser(p)).absolute() for p in options.deny_read),
        run_base=run_base,
        local_fetch_hosts=tuple(options.local_fetch_hosts),
        allow_unsandboxed=options.allow_unsandboxed,
        writable_git=options.writable_git,
        agents=load_catalog(
            workdir, options.agents_dirs, on_warning, options.setting_sources
        ).agents,
        child_command=shlex.split(os.environ.get("ISOAGENT_CHILD_COMMAND", "")) or None,
        verbose=options.verbose,
        record=None if options.record is None else Path(options.record),
        replay=None if options.replay is None else Path(options.replay),
        replay_match=options.replay_match,
        remote=remote,
        tools=None if options.tools is None else _words(options.tools),
        max_budget_usd=options.max_budget_usd,
        json_schema=None if options.json_schema is None else check_schema(options.json_schema),
        api_batches=options.api_batches,
        batch_window=options.batch_window,
    )
    agents = options.agents
    settings = claude_settings(
        settings,
        system_prompt=options.system_prompt,
        append_system_prompt=options.append_system_prompt,
        allowed_tools=_words(options.allowed_tools),
        disallowed_tools=_words(options.disallowed_tools),
        agents=None if agents is None else {name: _agent_json(d) for name, d in agents.items()},
        permission_mode=options.permission_mode,
        continue_=options.continue_conversation,
        resume=options.resume,
    )
    servers = mcp_servers.load(workdir, options.mcp_config, strict=options.strict_mcp_config)
    if settings.child_network == "off":
        servers = servers.offline()
    problems: list[str] = []
    if options.strict_mcp_config:
        agents_kept, problems = mcp_servers.strict_agents(settings.agents)
        settings = dataclasses.replace(settings, agents=agents_kept)
    if on_warning is not None:
        for problem in [*problems, *servers.problems(settings.agents.values())]:
            on_warning(f"warning: {problem}")
    return dataclasses.replace(settings, mcp_servers=servers)


def child_network(
    network: ChildNetwork, allowed_domains: Sequence[str], remote: bool
) -> ChildNetwork:
    """The children's network: ``allowed_domains`` turns it on; a ``ValueError`` for
    what cannot hold together (``remote``: children on other hosts)."""
    if network not in ("off", "on", "host"):
        raise ValueError(f"--child-network {network!r}: it is off, on or host")
    if allowed_domains:
        if network == "host":
            raise ValueError(
                "--allowed-domains needs --child-network on: with host, children reach the "
                "network directly, past any allow-list"
            )
        network = "on"
    if network == "on" and remote:
        raise ValueError(
            "--child-network on needs children on this machine (the egress proxy is here): "
            "with --hosts, use off or host"
        )
    return network


def call_options(options: Options) -> CallOptions | None:
    """What the parent's model calls add to their requests (None: nothing); a
    ``ValueError`` says what cannot be sent."""
    budget = options.max_thinking_tokens or 0
    max_tokens = _LIMITS.max_tokens
    if budget >= max_tokens:
        raise ValueError(
            f"--max-thinking-tokens {budget} must be below the parent's max_tokens ({max_tokens})"
        )
    thinking: str | None = options.thinking if options.thinking != "disabled" else ""
    if budget and not thinking:
        thinking = "enabled"
    made = CallOptions(
        effort=options.effort or "",
        thinking=thinking or "",
        thinking_budget=budget if thinking == "enabled" else 0,
        thinking_display=(thinking and options.thinking_display) or "",
        task_budget=options.task_budget or 0,
        betas=_words(options.betas),
    )
    return made if made != CallOptions() else None


def default_model() -> str:
    """The model when none is given: $ISOAGENT_MODEL, $ANTHROPIC_MODEL, else sonnet's."""
    return next(
        (os.environ[name] for name in MODEL_VARIABLES if os.environ.get(name)), DEFAULT_MODEL
    )


def _words(value: str | Sequence[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _agent_json(definition: AgentDefinition | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(definition, AgentDefinition):
        return definition.as_claude_json()
    return dict(definition)


def load_catalog(
    workdir: Path,
    agents_dirs: Sequence[str | Path],
    on_warning: Any = None,
    sources: Sequence[str] | None = None,
) -> Any:
    """Built-in and file-defined agent types (an ``AgentCatalog``); each problem with a file
    is handed to ``on_warning`` as one line, never fatal. ``sources`` (Claude Code's
    ``--setting-sources``): ``user`` reads ~/.claude/agents, ``project`` the workspace's
    .claude/agents; None: both."""
    from isoagent.parent.claude_code.agent_files import load_agents

    unknown = set(sources or ()) - {"user", "project", "local"}
    if unknown:
        raise ValueError(
            f"invalid setting source {sorted(unknown)[0]!r}: use user, project or local"
        )
    catalog = load_agents(
        workdir,
        extra_dirs=tuple(Path(d) for d in agents_dirs),
        user=sources is None or "user" in sources,
        project=sources is None or "project" in sources,
    )
    if on_warning is not None:
        for warning in catalog.warnings:
            on_warning(f"warning: {warning}")
        for error in catalog.errors:
            on_warning(f"agent file skipped: {error.describe()}")
    return catalog


def added_dirs(names: Sequence[str | Path]) -> tuple[Path, ...]:
    """``--add-dir`` folders as real absolute paths; a ``ValueError`` names one that is
    missing or not a folder."""
    dirs: list[Path] = []
    for name in names:
        path = Path(os.path.realpath(name))
        if not path.is_dir():
            missing = "does not exist" if not path.exists() else "is not a directory"
            raise ValueError(f"--add-dir {name}: {missing}")
        if path not in dirs:
            dirs.append(path)
    return tuple(dirs)


_REMOTE_ONLY = (
    "launcher", "remote_python", "remote_workdir", "heartbeat", "retries", "retry_crashed",
    "launch_timeout",
)  # fmt: skip


def remote_settings(options: Options) -> RemoteSettings | None:
    """``RemoteSettings`` from ``hosts`` and its companions; None without ``hosts``.
    A ``ValueError`` says what cannot be used."""
    if options.hosts is None:
        given = [
            f"--{name.replace('_', '-')}"
            for name in _REMOTE_ONLY
            if getattr(options, name) not in (getattr(_REMOTE, name), None, False)
        ]
        if given:
            raise HostSpecError(f"without --hosts, {', '.join(given)} cannot be used")
        return None
    from isoagent.parent.children.remote import Launcher

    Launcher(options.launcher, options.remote_python)  # a template that cannot work
    return RemoteSettings(
        hosts=tuple(parse_hosts(options.hosts)),
        launcher=options.launcher,
        remote_python=options.remote_python,
        remote_workdir=options.remote_workdir or "",
        heartbeat=options.heartbeat,
        retries=options.retries,
        retry_crashed=options.retry_crashed,
        launch_timeout=options.launch_timeout,
    )
