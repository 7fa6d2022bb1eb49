"""``Options``: what a caller sets, typed, with the CLI's defaults; ``settings_for`` makes
them the one ``Settings`` a ``Session`` runs with.

This is the core the Python API (``isoagent.task(..., options=Options(...))``) and the
click commands share: a command builds ``Options`` from its flags and calls the same
``settings_for``. Adding an option: a field here (with its default, and its line in the
class docstring's Attributes: help() and the docs show it), what
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
from isoagent.parent.claude_code.output_styles import output_style
from isoagent.parent.model.aliases import resolve_model
from isoagent.parent.records.run_folder import RUNS, project_root, runs_dir_for
from isoagent.parent.records.terminal_text import warn
from isoagent.parent.settings import (
    DEFAULT_MODEL,
    ChildNetwork,
    ReplayMatch,
    SandboxChoice,
    Settings,
)
from isoagent.parent.trust import claude_record
from isoagent.parent.trust import workspace as workspace_trust
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
    """Everything a run can be set to; each default is the CLI's (its flag is the field's
    name in kebab case: ``max_turns`` is ``--max-turns``). Each value is checked when the
    ``Options`` is built: a wrong name or type raises ``OptionError`` saying what is wanted.

    Example: ``isoagent.task("find the tests", options=Options(model="haiku", timeout=60))``.

    Attributes:
        workdir: The workspace the agents work in.
        model: A model id or alias (sonnet, opus, haiku); None: ``$ISOAGENT_MODEL``,
            ``$ANTHROPIC_MODEL``, else sonnet.
        max_turns: Model turns per agent; 0: no limit (an agent file's ``maxTurns`` wins).
        add_dirs: More folders the agents may use as they use the workspace.
        timeout: Wall-clock seconds per child before its processes are ended.
        max_parallel: Children running at once; None: 4, or the hosts' slots with ``hosts``.
        max_depth: Levels of children: 2 lets a child whose agent type delegates
            (general-purpose) start children of its own.
        agents_dirs: More folders of agent files (``*.md``, Claude Code's format).
        agents: More agent types, by name: ``AgentDefinition`` or ``--agents`` JSON's dicts.
        verbose: Every tool call on stderr (the CLI's ``-v``).
        sandbox: auto (read-only agents read-only, the others write only the workspace),
            off, workspace or read-only.
        allow_unsandboxed: Run read-only agents unconfined where the kernel has no Landlock.
        writable_git: Writing agents may change ``.git`` (by default read-only to children).
        child_network: off: no network; on: through the parent's proxy, to public addresses
            of ``allowed_domains``; host: the host's network, directly, unfiltered.
        allowed_domains: The hosts children may reach through the proxy (``example.com``,
            ``*.example.com``); implies ``child_network="on"``.
        deny_read: More paths children may not read (``~/.ssh``, ``~/.aws`` and the like are
            always denied).
        run_dir: Where run folders go; None: ``$ISOAGENT_RUN_DIR``, else the project's
            ``.isoagent/runs`` (the nearest folder up from ``workdir`` with ``.isoagent`` or
            ``.git``), else (a read-only workspace) ``$XDG_STATE_HOME/isoagent/runs``.
        local_fetch_hosts: Hosts ``WebFetch`` may reach although their address is private.
        max_tokens_total: The run's token budget; 0: none.
        api_retry_deadline: Seconds a refused (429), overloaded (529) or failed model call is
            retried for.
        cpu_seconds: CPU-time limit per child process and per command it runs; 0: none.
        memory_mb: Address-space limit per child process and command, in MiB; 0: none.
        max_processes: Process limit per child; 0: none.
        max_file_size_mb: Largest file a child's command may write, in MiB; 0: none.
        child_disk_mb: What the parent may write for one child in the run folder (its
            transcript, a Result too large to hold, its summary), in MiB; past it the child
            ends; 0: none.
        hosts: Run children on these hosts: ``name[:slots],...`` or ``@FILE``.
        launcher: The command that runs a child on ``{host}`` (ssh, srun, kubectl exec).
        remote_python: The Python with isoagent installed, on the hosts.
        remote_workdir: The workspace on the hosts; None: the local workspace's path.
        heartbeat: Seconds of silence after which a link to a host is dead.
        retries: Launches on another host after a failed launch or a lost link.
        retry_crashed: Also try again a child that crashed after it started.
        launch_timeout: Seconds from launch until a remote child says Hello.
        record: Write every model call (request and response) to this JSONL file.
        replay: Answer model calls from a file ``record`` wrote: no network, no key.
        replay_match: strict, or loose (tool outputs ignored when matching a call).
        system_prompt: Replace the parent agent's system prompt.
        append_system_prompt: Add to the parent agent's system prompt.
        allowed_tools: Tools the parent may use unasked (``"Bash(git:*) Edit"``).
        disallowed_tools: Tools taken from the parent and every agent type.
        permission_mode: default, acceptEdits, bypassPermissions, or plan (nothing writes).
        continue_conversation: Continue the latest run's conversation.
        resume: A session id (or run id) whose conversation to continue.
        tools: The base tools (Claude Code's names), the children's too; None: all.
        setting_sources: Whose agent files and settings files are read (user, project,
            local); None: all.
        max_budget_usd: US dollars the run's model calls may cost; 0: no limit.
        json_schema: The parent's answer as JSON of this schema (``structured_output``).
        fallback_model: A model id or alias used when the model is overloaded.
        session_id: A UUID for the run's session; None: its run id.
        fork_session: Resume or continue as a new session, not the earlier one's.
        effort: The parent's model calls' effort: low, medium, high or max.
        thinking: adaptive or disabled thinking for the parent's model calls.
        max_thinking_tokens: Thinking with this budget of tokens; 0: none.
        thinking_display: How thinking is shown, as Claude Code's flag says.
        task_budget: Tokens the model is told it has for the task.
        betas: ``anthropic-beta`` headers for the model calls.
        mcp_config: MCP servers for subagents: JSON objects or files (``{"mcpServers":
            {...}}``), besides the workspace's ``.mcp.json``.
        strict_mcp_config: Use only ``mcp_config``'s servers, not ``.mcp.json``.
        trust: Use the workspace's ``.mcp.json``, settings files and agent files' own MCP
            servers for this run though it is not trusted (``isoagent trust`` records it).
        api_batches: A batch's model calls as Anthropic Message Batches, at half price.
        batch_window: Seconds a call waits for others to join its Message Batch.
    """

    workdir: str | Path = "."
    model: str | None = None
    max_turns: int = 0
    add_dirs: Sequence[str | Path] = ()
    timeout: float = 600.0
    max_parallel: int | None = None
    max_depth: int = 1
    agents_dirs: Sequence[str | Path] = ()
    agents: Mapping[str, AgentDefinition | Mapping[str, Any]] | None = None
    verbose: bool = False
    sandbox: SandboxChoice = "auto"
    allow_unsandboxed: bool = False
    writable_git: bool = False
    child_network: ChildNetwork = "off"
    allowed_domains: str | Sequence[str] = ()
    deny_read: Sequence[str | Path] = ()
    run_dir: str | Path | None = None
    local_fetch_hosts: Sequence[str] = ()
    max_tokens_total: int = 0
    api_retry_deadline: float = 600.0
    cpu_seconds: int = _LIMITS.cpu_seconds
    memory_mb: int = _LIMITS.address_space_mb
    max_processes: int = _LIMITS.max_processes
    max_file_size_mb: int = _LIMITS.file_size_mb
    child_disk_mb: int = Settings.child_disk_mb
    hosts: str | None = None
    launcher: str = _REMOTE.launcher
    remote_python: str = _REMOTE.remote_python
    remote_workdir: str | None = None
    heartbeat: float = _REMOTE.heartbeat
    retries: int = _REMOTE.retries
    retry_crashed: bool = False
    launch_timeout: float = _REMOTE.launch_timeout
    record: str | Path | None = None
    replay: str | Path | None = None
    replay_match: ReplayMatch = "strict"
    system_prompt: str = ""
    append_system_prompt: str = ""
    allowed_tools: str | Sequence[str] = ()
    disallowed_tools: str | Sequence[str] = ()
    permission_mode: Literal["default", "acceptEdits", "bypassPermissions", "plan"] = "default"
    continue_conversation: bool = False
    resume: str | None = None
    tools: str | Sequence[str] | None = None
    setting_sources: Sequence[Literal["user", "project", "local"]] | None = None
    max_budget_usd: float = 0.0
    json_schema: Mapping[str, Any] | None = None
    fallback_model: str | None = None
    session_id: str | None = None
    fork_session: bool = False
    effort: Literal["low", "medium", "high", "max"] | None = None
    thinking: Literal["adaptive", "disabled"] | None = None
    max_thinking_tokens: int | None = None
    thinking_display: str | None = None
    task_budget: int | None = None
    betas: str | Sequence[str] = ()
    mcp_config: Sequence[str] = ()
    strict_mcp_config: bool = False
    trust: bool = False
    api_batches: bool = False
    batch_window: float = _BATCH_WINDOW

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


def settings_for(
    options: Options,
    on_warning: Any = None,
    ask_trust: workspace_trust.Ask | None = None,
    settings_files: bool = False,
) -> Settings:
    """The ``Settings`` of a run with ``options``: agent files read, the workspace's files
    used as far as it is trusted, models resolved, paths checked. A ``ValueError`` says in
    one line what cannot be used. ``on_warning`` is told each problem with an agent file
    (they are never fatal), and (default: on stderr) that the run folders go to the state
    folder and what the workspace's trust leaves out. ``ask_trust``: who is asked whether
    the workspace is trusted (None: nobody); ``settings_files``: the run applies the
    workspace's ``.claude/settings*.json`` (``isoagent -p``), so their trust is decided."""
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
            f"cannot create run folders in {project_root(workdir) / RUNS}: they go to "
            f"{run_base} (--run-dir chooses where)"
        )
    say = on_warning or warn
    catalog = load_catalog(workdir, options.agents_dirs, on_warning, options.setting_sources)
    sources = options.setting_sources
    applied = [
        name
        for name, source in workspace_trust.SETTING_SOURCES.items()
        if settings_files and (sources is None or source in sources)
    ]
    files = workspace_trust.workspace_files(workdir, catalog.agents, settings=applied)
    if options.strict_mcp_config:
        files.pop(workspace_trust.MCP_FILE, None)
    trust = workspace_trust.decide(
        workdir, files, given=options.trust, ask=ask_trust, on_line=say, settings=applied
    )
    for line in trust.lines():
        say(line)
    left_out = {str(workdir / f.name) for f in trust.skipped()}
    agents = mcp_servers.without_own_servers(catalog.agents, lambda a: a.source in left_out)
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
        agents=agents,
        setting_sources=None if options.setting_sources is None else tuple(options.setting_sources),
        output_style=output_style(workdir, options.setting_sources, warn=on_warning or warn),
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
    inline = options.agents
    settings = claude_settings(
        settings,
        system_prompt=options.system_prompt,
        append_system_prompt=options.append_system_prompt,
        allowed_tools=_words(options.allowed_tools),
        disallowed_tools=_words(options.disallowed_tools),
        agents=None if inline is None else {name: _agent_json(d) for name, d in inline.items()},
        permission_mode=options.permission_mode,
        continue_=options.continue_conversation,
        resume=options.resume,
    )
    mcp_file = files.get(workspace_trust.MCP_FILE)
    ours, refused = None, frozenset[str]()
    if mcp_file is not None and trust.trusted(mcp_file.name):
        ours = (str(workdir / mcp_file.name), mcp_file.data.decode("utf-8", "replace"))
        own = workspace_trust.settings_objects(workdir)
        refused = claude_record.mcp_approvals(workdir, own, trusted=False).disabled
    servers = mcp_servers.load(options.mcp_config, ours, refused)
    if settings.child_network == "off":
        servers = servers.offline()
    problems: list[str] = []
    if options.strict_mcp_config:
        agents_kept, problems = mcp_servers.strict_agents(settings.agents)
        settings = dataclasses.replace(settings, agents=agents_kept)
    if on_warning is not None:
        for problem in [*problems, *servers.problems(settings.agents.values())]:
            on_warning(f"warning: {problem}")
    return dataclasses.replace(settings, mcp_servers=servers, workspace_trust=trust)


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
    ``ValueError`` says what cannot be sent. Unless told, the parent thinks as Claude
    Code's main agent does: by its model, with ``MAX_THINKING_TOKENS`` as the budget of a
    model that thinks with one (0: it does not think)."""
    budget = options.max_thinking_tokens or 0
    max_tokens = _LIMITS.max_tokens
    if budget >= max_tokens:
        raise ValueError(
            f"--max-thinking-tokens {budget} must be below the parent's max_tokens ({max_tokens})"
        )
    thinking: str = options.thinking or ("enabled" if budget else "")
    if not thinking and options.max_thinking_tokens is None:
        thinking, budget = _thinking_from_environment()
    made = CallOptions(
        effort=options.effort or "",
        thinking=thinking,
        thinking_budget=budget if thinking in ("enabled", "auto") else 0,
        thinking_display=(thinking != "disabled" and options.thinking_display) or "",
        task_budget=options.task_budget or 0,
        betas=_words(options.betas),
    )
    return made if made != CallOptions() else None


def _thinking_from_environment() -> tuple[str, int]:
    """Claude Code's ``MAX_THINKING_TOKENS``: "auto" with it as the budget, "disabled" for
    0; a value that is no number is said once and left out."""
    value = os.environ.get("MAX_THINKING_TOKENS", "").strip()
    if not value:
        return "auto", 0
    if not value.isdigit():
        warn(f"warning: MAX_THINKING_TOKENS={value!r} is not a number of tokens: ignored")
        return "auto", 0
    return ("auto", int(value)) if int(value) else ("disabled", 0)


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
