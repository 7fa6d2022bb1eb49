"""Everything one invocation is set to, typed, built once (by the CLI's option bundle or the
Python API) and passed whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from isoagent.parent.children.hosts import RemoteSettings
from isoagent.parent.claude_code.mcp_servers import McpServers
from isoagent.parent.claude_code.output_styles import OutputStyle
from isoagent.protocol import AgentSpec, CallOptions, Limits

if TYPE_CHECKING:
    from isoagent.parent.agent.hooks import Hooks
    from isoagent.parent.trust.workspace import Trust

DEFAULT_MODEL = "claude-sonnet-5"
SandboxChoice = Literal["auto", "off", "workspace", "read-only"]
ChildNetwork = Literal["off", "on", "host"]
ReplayMatch = Literal["strict", "loose"]


def default_limits() -> Limits:
    """What each child may use unless told otherwise (0 in ``Limits`` means no limit)."""
    return Limits(cpu_seconds=900, address_space_mb=8192, max_processes=512, file_size_mb=4096)


@dataclass(frozen=True)
class Settings:
    workdir: Path
    add_dirs: tuple[Path, ...] = ()  # --add-dir: more folders the agents may use, absolute
    model: str = DEFAULT_MODEL
    limits: Limits = field(default_factory=default_limits)
    timeout: float = 600.0  # wall-clock seconds per child
    # MiB the parent writes for one child in the run folder (transcript, a spooled Result,
    # its summary); 0: no limit. An honest child's transcript takes a few MB
    child_disk_mb: int = 1024
    max_parallel: int = 4  # children at once
    # levels of children: 1, the parent's alone; 2, a child's too (--max-depth)
    max_depth: int = 1
    max_tokens_total: int = 0  # the run's token budget; 0: none
    # seconds a model call refused (429), overloaded (529) or failed is retried for
    api_retry_deadline: float = 600.0
    agents: dict[str, AgentSpec] = field(default_factory=dict)
    sandbox: SandboxChoice = "auto"
    # off: none at all; on: through the parent's egress proxy; host: the host's, directly
    child_network: ChildNetwork = "off"
    allowed_domains: tuple[str, ...] = ()  # on: the hosts the proxy lets out; (): any public
    egress_socket: str = ""  # on: the running proxy's Unix socket (the session sets it)
    allow_unsandboxed: bool = False
    writable_git: bool = False  # writing agents may change .git (hooks, config)
    child_command: list[str] | None = None  # how to start a child; None: python -m isoagent.child
    run_base: Path | None = None  # where run folders go; None: <workdir>/.isoagent/runs
    verbose: bool = False
    record: Path | None = None  # write every model call here
    replay: Path | None = None  # answer model calls from here instead of the API
    replay_match: ReplayMatch = "strict"
    # the parent agent, as Claude Code's flags set it (``isoagent -p``, the Python API)
    system_prompt: str = ""  # replaces isoagent's own parent prompt; "": keep it
    append_system_prompt: str = ""
    allowed_tools: tuple[str, ...] = ()  # Claude Code tool rules; (): every tool
    disallowed_tools: tuple[str, ...] = ()  # taken from the parent and every agent type
    permission_mode: str = "default"  # plan: nothing writes (see parent_tools)
    resume: str = ""  # a run id whose conversation the parent continues
    # or a session file it goes on from (parent/records/claude_sessions.py), up to and with
    # the message resume_at (--resume-session-at); resume_drops: --resume-drops-turn
    resume_file: Path | None = None
    resume_at: str = ""
    resume_drops: str | None = None
    session_id: str = ""  # the session the run belongs to (Claude Code's); "": its run id
    fork_session: bool = False  # resuming starts a new session, not the resumed one's
    permission_prompt_tool: str = ""  # stdio: the parent's calls are asked of the SDK
    call_options: CallOptions | None = None  # what the parent's model calls add (--effort, ...)
    plugins: tuple[tuple[str, str], ...] = ()  # --plugin-dir: (name, folder) of each loaded
    remote: RemoteSettings | None = None  # --hosts: children on these hosts, not only here
    tools: tuple[str, ...] | None = None  # --tools: the base tools, children's too; None: all
    max_budget_usd: float = 0.0  # what the run's model calls may cost; 0: no limit
    budget_spent: float = 0.0  # of it, what earlier runs of the session spent (stream-json)
    # -p, as Claude Code: the budgets are checked between calls (the call that crosses the
    # line finishes), not reserved per call and shared fairly (``agent/cost_budget.py``)
    budget_between_calls: bool = False
    json_schema: dict[str, Any] | None = None  # the parent answers in this shape (--json-schema)
    fallback_model: str = ""  # calls to `model` go on with this one when it is overloaded
    mcp_servers: McpServers = field(default_factory=McpServers)  # .mcp.json, --mcp-config
    deny_read: tuple[Path, ...] = ()  # besides the defaults (sandbox_policy.DENY_READ)
    local_fetch_hosts: tuple[str, ...] = ()  # WebFetch may reach them on private addresses
    kept_files: tuple[Path, ...] = ()  # read-only to writing children (batch's -o file)
    api_batches: bool = False  # model calls go in Message Batches, at half price (batch)
    # seconds a queued call waits for others to join its batch: little beside the minutes a
    # Message Batch takes, and time for a fleet that is still starting to join the first one
    batch_window: float = 10.0
    batch_journal: Path | None = None  # the Message Batches sent for -o, for its rerun
    batch_input: str = ""  # isoagent batch: its FILE, as given ("-": stdin), for the run's record
    hooks: Hooks | None = None  # Claude Code's hooks: --settings' commands, the SDK's callbacks
    # --setting-sources: whose files are read (user, project, local); None: all of them
    setting_sources: tuple[str, ...] | None = None
    output_style: OutputStyle = field(default_factory=OutputStyle)  # the settings' outputStyle
    # which of the workspace's own files (.mcp.json, settings, agent files' servers) are used
    workspace_trust: Trust | None = None

    @property
    def runs_dir(self) -> Path:
        return self.run_base or self.workdir / ".isoagent" / "runs"
