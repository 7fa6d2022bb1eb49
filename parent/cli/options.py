"""The option bundles the commands share, and the one ``Settings`` they become."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from isoagent.parent import options as options_core
from isoagent.parent.batch.input import unknown_agent
from isoagent.parent.children.hosts import RemoteSettings
from isoagent.parent.cli.errors import fail
from isoagent.parent.cli.exit_codes import ExitCode
from isoagent.parent.options import OPTION_NAMES, Options, settings_for
from isoagent.parent.records.terminal_text import terminal_line
from isoagent.parent.settings import Settings

if TYPE_CHECKING:
    from isoagent.parent.claude_code.agent_files import AgentCatalog
    from isoagent.protocol import AgentSpec

DEFAULTS = Settings(workdir=Path("."))
LIMITS = DEFAULTS.limits
REMOTE = RemoteSettings(hosts=())


def workdir_option(help: str) -> Callable[..., Any]:
    """``--workdir``/``-C``: an existing folder, as an absolute path; ``help`` says what for."""
    return click.option(
        "--workdir",
        "-C",
        type=click.Path(exists=True, file_okay=False, resolve_path=True, path_type=Path),
        default=".",
        help=help,
    )


def run_dir_option() -> Callable[..., Any]:
    """``--run-dir``: where run folders are, for every command that makes or reads them."""
    return click.option(
        "--run-dir", metavar="DIR",
        help="Folder of the run folders (transcripts, logs) [env ISOAGENT_RUN_DIR]; default: "
        "the project's .isoagent/runs (the nearest folder up from the workspace with "
        ".isoagent or .git), or $XDG_STATE_HOME/isoagent/runs (~/.local/state/isoagent/runs) "
        "when that cannot be made (a read-only workspace).",
    )  # fmt: skip


PARENT_MODEL = "the parent agent, and for subagents whose agent type names none"
AGENT_MODEL = "the subagents whose agent type names none"


def settings_options(
    fn: Callable[..., Any],
    extra: Sequence[Callable[..., Any]] = (),
    *,
    model_for: str = PARENT_MODEL,
    print_mode: bool = False,
) -> Callable[..., Any]:
    """The options every model-backed command shares, handed to it as one ``settings``;
    ``extra``: a command's own options that are ``Options`` fields too; ``model_for``: who
    ``--model`` is for, as its help says; ``print_mode`` (``-p``): the workspace's settings
    files are applied, and nobody is asked whether the workspace is trusted."""
    options = [
        click.option(
            "--model", envvar=["ISOAGENT_MODEL", "ANTHROPIC_MODEL"], default=DEFAULTS.model,
            show_default=True,
            help=f"Model for {model_for}; an id or an alias (sonnet, opus, haiku, fable) as "
            "in Claude Code [env ISOAGENT_MODEL, ANTHROPIC_MODEL].",
        ),
        click.option(
            "--max-turns", type=click.IntRange(0), default=LIMITS.max_turns,
            help="Turn limit per agent; 0 (the default, as in Claude Code): none, the "
            "timeout and the token budget still hold. An agent file's maxTurns wins.",
        ),
        workdir_option("Workspace the agents work in (default: the current directory)."),
        run_dir_option(),
        click.option(
            "--add-dir", "add_dirs", multiple=True, metavar="DIR",
            help="Another folder the agents may use as they use the workspace (read, and "
            "write for writing agents; its .git, .claude, .isoagent stay read-only); "
            "repeatable.",
        ),
        click.option(
            "--timeout", type=click.FloatRange(min=1), default=DEFAULTS.timeout, show_default=True,
            help="Wall-clock seconds per child before its processes are ended.",
        ),
        click.option(
            "--max-parallel", type=click.IntRange(1), default=DEFAULTS.max_parallel,
            show_default=True,
            help="Subagents running at once (with --hosts: the hosts' slots).",
        ),
        click.option(
            "--max-depth", type=click.IntRange(1), default=DEFAULTS.max_depth,
            show_default=True,
            help="Levels of subagents: 1, only the parent delegates; 2, a child with every "
            "tool (general-purpose) has task too, and its children are sandboxed processes "
            "of this parent's, under the same limits.",
        ),
        click.option(
            "--agents-dir", "agents_dirs", multiple=True,
            type=click.Path(exists=True, file_okay=False, path_type=Path),
            help="Another folder of agent files (*.md, Claude Code format); repeatable.",
        ),
        click.option(
            "-v", "--verbose", is_flag=True,
            help="Show every tool call on stderr, each agent's indented under the agent that "
            "started it.",
        ),
        *LIMIT_OPTIONS,
        *REMOTE_OPTIONS,
        click.option(
            "--record", type=click.Path(dir_okay=False, path_type=Path),
            help="Write every model call (request and response) to this JSONL file.",
        ),
        click.option(
            "--replay", type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="Answer model calls from a file written by --record: no network, no key.",
        ),
        click.option(
            "--replay-match", type=click.Choice(["strict", "loose"]), default=DEFAULTS.replay_match,
            show_default=True,
            help="loose: ignore tool outputs when matching a replayed call.",
        ),
        click.option(
            "--mcp-config", "mcp_config", multiple=True, metavar="JSON|FILE",
            help='MCP servers for subagents ({"mcpServers": {...}}, as in Claude Code), '
            "besides the workspace's .mcp.json; an agent gets a server's tools when its "
            "tools list names them (mcp__server__tool, mcp__server); repeatable.",
        ),
        click.option(
            "--strict-mcp-config", is_flag=True,
            help="Use only the --mcp-config servers, not the workspace's .mcp.json.",
        ),
        click.option(
            "--trust", is_flag=True,
            help="Trust the workspace's .mcp.json, .claude/settings*.json and agent files' "
            "MCP servers for this run (isoagent trust records it).",
        ),
        *extra,
    ]  # fmt: skip
    names = _names(options)

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in names}
        try:
            settings = settings_from(values, print_mode=print_mode)
        except ValueError as exc:  # e.g. a --hosts spec that cannot be used
            raise click.UsageError(str(exc)) from None
        return fn(*args, settings=settings, **kwargs)

    return _apply(options, command)


LIMIT_OPTIONS = [
    click.option(
        "--sandbox", type=click.Choice(["auto", "off", "workspace", "read-only"]),
        default=DEFAULTS.sandbox, show_default=True,
        help="OS sandbox for children (Landlock). auto: agents without write tools are "
        "read-only, the others may write only in the workspace.",
    ),
    click.option(
        "--allow-unsandboxed", is_flag=True,
        help="Run read-only agents unconfined where the kernel has no Landlock.",
    ),
    click.option(
        "--writable-git", is_flag=True,
        help="Let writing agents change .git (for agents meant to commit); by default .git, "
        ".claude and .isoagent are read-only to children.",
    ),
    click.option(
        "--child-network", type=click.Choice(["off", "on", "host"]), default="off",
        show_default=True,
        help="off: children run in an empty network namespace (their model calls go through "
        "the parent); on: their way out is the parent's proxy (HTTP_PROXY), to public "
        "addresses of --allowed-domains; host: the host's network, directly, unfiltered.",
    ),
    click.option(
        "--allowed-domains", "allowed_domains", multiple=True, metavar="DOMAINS",
        help="The hosts children may reach through the proxy (example.com, *.example.com; "
        "comma-separated or repeated); implies --child-network on. Default: any public host.",
    ),
    click.option(
        "--allow-local-fetch", "local_fetch_hosts", multiple=True, metavar="HOST",
        help="A host WebFetch may fetch although it is on a private, loopback or link-local "
        "address (an intranet's docs); repeatable. Others are refused, redirects included.",
    ),
    click.option(
        "--deny-read", "deny_read", multiple=True, metavar="PATH",
        help="Another file or folder sandboxed children may not read (besides ~/.ssh, ~/.aws, "
        "~/.netrc, shell histories and start-up files, /etc/shadow, the run folders, ...); "
        "repeatable.",
    ),
    click.option(
        "--max-tokens-total", type=click.IntRange(0), default=DEFAULTS.max_tokens_total,
        help="Token budget for the whole run (0: none); past it agents end with status budget.",
    ),
    click.option(
        "--max-budget-usd", type=click.FloatRange(min=0), default=DEFAULTS.max_budget_usd,
        metavar="USD",
        help="What the run's model calls may cost, every agent's (0: no limit); past it "
        "agents end with status budget (exit 5).",
    ),
    click.option(
        "--api-retry-deadline", type=click.FloatRange(min=1),
        default=DEFAULTS.api_retry_deadline, show_default=True,
        help="Seconds a model call the API refuses (429), is overloaded for (529) or fails "
        "is retried for, waiting out the rate limit, before its agent ends with an error.",
    ),
    click.option(
        "--cpu-seconds", type=click.IntRange(0), default=LIMITS.cpu_seconds, show_default=True,
        help="CPU-time limit per child process and per command it runs (0: none).",
    ),
    click.option(
        "--memory-mb", type=click.IntRange(0), default=LIMITS.address_space_mb, show_default=True,
        help="Address-space limit per child process and command, and the child's memory "
        "cgroup's limit over all of them where there is one, in MiB (0: none).",
    ),
    click.option(
        "--max-processes", type=click.IntRange(0), default=LIMITS.max_processes, show_default=True,
        help="Process limit: RLIMIT_NPROC, and the child's pids cgroup where there is one "
        "(the only one that binds root) (0: none).",
    ),
    click.option(
        "--max-file-size-mb", type=click.IntRange(0), default=LIMITS.file_size_mb,
        show_default=True,
        help="Largest file a child's command may write, in MiB (0: none).",
    ),
    click.option(
        "--child-disk-mb", type=click.IntRange(0), default=DEFAULTS.child_disk_mb,
        show_default=True,
        help="Disk the parent may fill for one child in the run folder (its transcript, a "
        "Result too large to hold, its summary), in MiB; past it the child ends (0: none).",
    ),
]  # fmt: skip


REMOTE_OPTIONS = [
    click.option(
        "--hosts", metavar="SPEC",
        help="Run children on these hosts: name[:slots],... or @FILE (one a line); the name "
        "local is this machine. Children go where a slot is free.",
    ),
    click.option(
        "--launcher", metavar="TEMPLATE", default=REMOTE.launcher, show_default=True,
        help="Command that runs what follows it on {host}, e.g. 'srun -u -N1 -n1 -w {host} --' "
        "or 'kubectl exec -i {host} --'; without {host} the engine places each child.",
    ),
    click.option(
        "--remote-python", metavar="PATH", default=REMOTE.remote_python, show_default=True,
        help="The Python with isoagent installed, on the hosts.",
    ),
    click.option(
        "--remote-workdir", metavar="DIR",
        help="The workspace on the hosts (default: the local workspace's path).",
    ),
    click.option(
        "--heartbeat", type=click.FloatRange(min=0.1), default=REMOTE.heartbeat,
        show_default=True, help="Seconds of silence after which a link to a host is dead.",
    ),
    click.option(
        "--retries", type=click.IntRange(0), default=REMOTE.retries, show_default=True,
        help="Launches on another host after a failed launch or a lost link.",
    ),
    click.option(
        "--retry-crashed", is_flag=True,
        help="Also try again a child that crashed after it started.",
    ),
    click.option(
        "--launch-timeout", type=click.FloatRange(min=1), default=REMOTE.launch_timeout,
        show_default=True,
        help="Seconds from launch until a remote child says Hello (a queue's wait included).",
    ),
]  # fmt: skip


def output_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        if kwargs["include_partial_messages"] and kwargs["output_format"] != "stream-json":
            needs = "error: --include-partial-messages needs --output-format stream-json"
            fail(needs, ExitCode.USAGE)
        return fn(*args, **kwargs)

    return _apply(
        [
            click.option(
                "--output-format",
                type=click.Choice(["text", "json", "stream-json"]),
                default="text",
                show_default=True,
                help="text: the answer; json: one object at the end; "
                "stream-json: one JSON line per event.",
            ),
            click.option(
                "--include-partial-messages",
                is_flag=True,
                help="stream-json: also every event of every model call as it streams in "
                "(Claude Code's stream_event lines).",
            ),
        ],
        command,
    )


def _apply(options: list[Callable[..., Any]], fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(options):
        fn = option(fn)
    return fn


def _names(options: list[Callable[..., Any]]) -> list[str]:
    """The parameter names a list of click option decorators declares."""
    probe = _apply(options, lambda: None)
    return [param.name for param in probe.__click_params__ if param.name]  # type: ignore[attr-defined]


def load_catalog(workdir: Path, agents_dirs: tuple[Path, ...]) -> AgentCatalog:
    """Built-in and file-defined agent types; file problems are reported, never fatal."""
    catalog: AgentCatalog = options_core.load_catalog(workdir, agents_dirs, _warn)
    return catalog


def _warn(line: str) -> None:
    click.echo(f"isoagent: {terminal_line(line)}", err=True)  # it quotes agent files


def settings_from(values: Mapping[str, Any], *, print_mode: bool = False) -> Settings:
    """``Settings`` from the values of ``settings_options``: the ``Options`` they give,
    made ``Settings`` by the same core the Python API uses (asking on a terminal whether
    the workspace is trusted, but in ``print_mode``). A ``ValueError`` says what cannot be
    used."""
    from isoagent.parent.cli.trust import ask_on_terminal

    given = {name: values[name] for name in values if name in OPTION_NAMES}
    context = click.get_current_context(silent=True)
    if (
        context is not None
        and context.get_parameter_source("max_parallel") == click.core.ParameterSource.DEFAULT
    ):
        given["max_parallel"] = None  # with --hosts, the pool's slots say how many at once
    ask = None if print_mode else ask_on_terminal
    return settings_for(Options(**given), _warn, ask, settings_files=print_mode)


def pick_agent(agents: Mapping[str, AgentSpec], name: str) -> AgentSpec:
    """The agent type called ``name``; an unknown name is a usage error."""
    agent = agents.get(name)
    if agent is None:
        fail(unknown_agent(name, agents), ExitCode.USAGE)
    return agent
