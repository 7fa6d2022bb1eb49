"""Every frame that crosses the pipe, as msgspec Structs.

Content blocks and messages use the Anthropic Messages API's own JSON shape
(``{"type": "text", "text": ...}``), so a conversation encodes straight into an
API request, a transcript line or a frame with no conversion layer.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

# 2: thinking blocks; 3: bash rules; 4: Heartbeat, Task.identity, .heartbeat; 5: server tools;
# 6: Task.add_dirs (an older child would ignore the folders it may write in); 8: ModelError's
# rate_limit, overloaded and server kinds (an older child could not decode them); 9:
# AgentSpec.mcp_tools, Task.mcp_servers (an older child would drop the MCP tools); 10:
# SandboxPolicy.hidden (an older child would read what it hides), .local_fetch_hosts; 11:
# AgentSpec.mcp_servers (an agent's own MCP servers, its mcpServers' inline ones); 12:
# SandboxPolicy.proxy, .allowed_domains (an older child would have no way out); 13:
# McpServer.type, .url, .headers, .tools, McpCall, McpReply (an older child would start a
# command-less server); 14: Task.hooks, HookCall, HookReply (an older child would run a tool
# call that a hook denies)
# 15: Task.subagents, TaskCall, TaskReply (an older child would not delegate)
# 16: Task.history (an older child would start a continued conversation afresh)
# 17: tools by Claude Code's names and inputs (AgentSpec.tools, HookPlan, HookCall.tool,
# Progress.tool: "Bash", not "bash"; an older child would know none of its tools)
# 18: AgentSpec.delegates; a child's Agent tool refuses a type its Task does not list (the
# parent ends a child that asks for one: an older child's model would end it)
PROTOCOL_VERSION = 18

# --- conversation content (the Messages API's shapes) -----------------------


class TextBlock(msgspec.Struct, tag_field="type", tag="text", omit_defaults=True):
    text: str


class ToolUseBlock(msgspec.Struct, tag_field="type", tag="tool_use", omit_defaults=True):
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(msgspec.Struct, tag_field="type", tag="tool_result", omit_defaults=True):
    tool_use_id: str
    content: str
    is_error: bool = False


class ThinkingBlock(msgspec.Struct, tag_field="type", tag="thinking", omit_defaults=True):
    """A model's thinking; it must go back to the API unchanged with the tool results."""

    thinking: str
    signature: str = ""  # compatible servers may leave it out


class RedactedThinkingBlock(
    msgspec.Struct, tag_field="type", tag="redacted_thinking", omit_defaults=True
):
    data: str


class ServerToolUseBlock(
    msgspec.Struct, tag_field="type", tag="server_tool_use", omit_defaults=True
):
    """A call of a tool the API runs itself (web search); it goes back unchanged."""

    id: str
    name: str
    input: dict[str, Any]


class WebSearchResultBlock(
    msgspec.Struct, tag_field="type", tag="web_search_tool_result", omit_defaults=True
):
    """What the API's web search found (or its error), passed back unchanged."""

    tool_use_id: str
    content: Any


Block = (
    TextBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ServerToolUseBlock
    | WebSearchResultBlock
)


class Message(msgspec.Struct, omit_defaults=True):
    role: Literal["user", "assistant"]
    content: list[Block]


class ToolSpec(msgspec.Struct, omit_defaults=True):
    """A tool the model may call: ours (a description and an input schema), or one the
    API runs itself (``type``, such as ``web_search_20250305``)."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)
    type: str = ""
    max_uses: int = 0


class Usage(msgspec.Struct):
    """Tokens of model calls, as the Messages API counts them: ``input_tokens`` are the
    ones after the last cache breakpoint; the prefix was written to the prompt cache
    (``cache_creation_input_tokens``) or read from it (``cache_read_input_tokens``)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
        )

    @property
    def total(self) -> int:
        """Every token the calls processed, cached or not: what the token budget counts."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
        )


# --- what a child is asked to do ---------------------------------------------

SandboxMode = Literal["off", "workspace", "read-only"]


class McpServer(msgspec.Struct, omit_defaults=True):
    """An MCP server (an ``.mcp.json`` entry) for the tools a child's agent names: a stdio
    one the child starts, inside its sandbox; an http or sse one (``url``) it connects to,
    through the egress proxy; an sdk one it calls through the parent."""

    name: str
    command: str = ""
    args: list[str] = []
    env: dict[str, str] = {}
    type: Literal["stdio", "http", "sse", "sdk"] = "stdio"
    url: str = ""
    headers: dict[str, str] = {}
    # sdk: the tools of an SDK's in-process server, as the parent listed them; the child
    # calls them through the parent (McpCall), the only process that reaches the SDK
    tools: list[ToolSpec] = []


class AgentSpec(msgspec.Struct, omit_defaults=True):
    """A resolved agent type: everything a child needs, nothing it must look up."""

    name: str
    description: str
    system_prompt: str
    tools: list[str]
    model: str | None = None
    max_turns: int | None = None
    source: str = "built-in"
    # Claude Code's Bash(git:*) rules: commands Bash may run (none: any) and may not
    bash_allow: list[str] = []
    bash_deny: list[str] = []
    # MCP tools it has: those its ``tools`` names (``mcp__server__tool``, or ``mcp__server``
    # for them all), or without ``tools`` every tool of each server its ``mcpServers`` lists
    mcp_tools: list[str] = []
    # the servers its ``mcpServers`` defines inline: its own, no other agent's
    mcp_servers: list[McpServer] = []
    effort: str = ""  # its requests' output_config.effort (low, medium, high, max); "": none
    background: bool = False  # its children run in the background (the parent's alone reads it)
    # its children may start children where --max-depth allows: Claude Code's Task (Agent)
    # among its tools, or no tools list (the parent's alone reads it)
    delegates: bool = False


# room for a thinking model's thinking and its answer (claude-sonnet-5 thinks by default)
DEFAULT_MAX_TOKENS = 16384


class Limits(msgspec.Struct, omit_defaults=True):
    """Per-child limits; 0 means "no limit"."""

    max_turns: int = 0
    max_tokens: int = DEFAULT_MAX_TOKENS
    bash_timeout: float = 120.0
    output_cap: int = 30_000
    cpu_seconds: int = 0
    address_space_mb: int = 0
    max_processes: int = 0
    file_size_mb: int = 0


class SandboxPolicy(msgspec.Struct, frozen=True, omit_defaults=True):
    """What a child may read, write and reach: built once per child by the parent
    (``parent/children/sandbox_policy.py``, ``policy_for``) and applied by the child to
    itself, before any tool runs (``child.sandbox.confine``)."""

    # read-only: only its private temp folder is writable; workspace: the workspace and
    # the added folders too; off: no kernel sandbox
    mode: SandboxMode = "off"
    network: bool = True  # the host's network, directly (--child-network host)
    # without it, the parent's egress proxy at this Unix socket path is the way out
    # (--child-network on); neither: no network at all
    proxy: str = ""
    # folders inside a writable workspace kept read-only (.git, .claude, .isoagent)
    protected: tuple[str, ...] = ()
    # what it may not read at all (~/.ssh, ~/.aws, the run folders, ...): each existing
    # one is covered by an empty, read-only mount
    hidden: tuple[str, ...] = ()
    # a pid namespace of its own and a /proc that shows only it (sandboxed, with mounts)
    pid_namespace: bool = False
    # hosts WebFetch may fetch though they are on a private, loopback or link-local address
    local_fetch_hosts: tuple[str, ...] = ()
    # the hosts WebFetch may fetch (the proxy checks them for the rest); (): any public
    allowed_domains: tuple[str, ...] = ()


# --- child -> parent ---------------------------------------------------------


class Hello(msgspec.Struct, tag=True):
    version: int
    pid: int


class CallOptions(msgspec.Struct, frozen=True, omit_defaults=True):
    """What the parent's own model calls add to the request, as Claude Code's flags say
    (``--effort``, ``--thinking``, ``--max-thinking-tokens``, ``--task-budget``,
    ``--betas``). A child's calls carry its agent's effort alone, if it has one."""

    effort: str = ""  # output_config.effort
    # "adaptive", "enabled" (with thinking_budget), "disabled"; "auto": as Claude Code by the
    # model (thinking_budget, if any, for a model that thinks with one); "": none sent
    thinking: str = ""
    thinking_budget: int = 0
    thinking_display: str = ""
    task_budget: int = 0  # output_config.task_budget, in tokens
    betas: tuple[str, ...] = ()  # anthropic-beta


class ModelCall(msgspec.Struct, tag=True, omit_defaults=True):
    """One model turn, as the child would send it to the Messages API."""

    turn: int
    model: str
    max_tokens: int
    system: str
    messages: list[Message]
    tools: list[ToolSpec] = []
    agent: str = ""
    options: CallOptions | None = None  # the parent's only


ProgressEvent = Literal["tool_start", "tool_end", "turn"]
HookPoint = Literal["PreToolUse", "PostToolUse", "Stop"]


class Progress(msgspec.Struct, tag=True, omit_defaults=True):
    event: ProgressEvent
    turns: int
    tool_calls: int
    elapsed: float
    tool: str = ""
    detail: str = ""


Status = Literal[
    "ok", "max_turns", "error", "cancelled", "budget", "timeout", "crashed", "launch_failed"
]

SpanValue = str | int | float | bool

# the spans a child sends in its Result, and the most the parent takes of them
MAX_SPANS = 1000


class Span(msgspec.Struct, omit_defaults=True):
    """One timed step of an agent (its run, a tool call), as plain data: a child has no
    network, so it sends its spans in its Result and the parent exports them
    (OpenTelemetry). ``id`` numbers the span in its recorder (a child's first, 1, is its
    agent's own), ``parent`` is an earlier span's (0: none); times are Unix nanoseconds.
    The parent gives a child's spans ids of its own: what a child says places a span only
    among its own."""

    id: int
    parent: int
    name: str
    start: int
    end: int
    attributes: dict[str, SpanValue] = {}
    error: str = ""  # the step failed, and why


class Result(msgspec.Struct, tag=True, omit_defaults=True):
    summary: str
    status: Status
    turns: int
    tool_calls: int
    usage: Usage
    duration: float
    error: str = ""
    spans: list[Span] = []  # with Task.trace: what its agent did, timed


class Heartbeat(msgspec.Struct, tag=True):
    """ "Still here", either way, over a link that can go silent (a remote child's)."""


class McpCall(msgspec.Struct, tag=True):
    """A call of a tool of an SDK's in-process MCP server, which only the parent reaches;
    the parent checks it against the Task and answers with an ``McpReply``."""

    id: int
    server: str
    tool: str
    arguments: dict[str, Any]


class HookCall(msgspec.Struct, tag=True, omit_defaults=True):
    """An agent asks the hooks about one of its steps, before it goes on: a tool call
    before it runs (PreToolUse), its output (PostToolUse), its end (Stop: SubagentStop for
    a child). A child sends it only for what its Task's ``hooks`` plan names."""

    id: int
    event: HookPoint
    tool: str = ""  # the tool's name (Claude Code's)
    tool_use_id: str = ""
    input: dict[str, Any] = {}
    output: str = ""  # PostToolUse: the tool's output; Stop: the agent's last words
    is_error: bool = False  # PostToolUse: the tool failed (Claude Code's PostToolUseFailure)
    again: bool = False  # Stop: a hook made it go on before (Claude Code's stop_hook_active)


class TaskCall(msgspec.Struct, tag=True):
    """A child's ``Agent`` call (``--max-depth`` 2 or more): a request, which the parent
    checks (depth, children in all, budget) before it starts the child's child, as its
    own sandboxed process; it answers with a ``TaskReply``."""

    id: int
    description: str
    prompt: str
    subagent_type: str


ChildFrame = Hello | ModelCall | Progress | Result | Heartbeat | McpCall | HookCall | TaskCall

# --- parent -> child ---------------------------------------------------------


class Identity(msgspec.Struct, omit_defaults=True):
    """Who a child is. It travels in the Task, not in an environment: a remote child's
    login environment has none of it."""

    tag: str = ""  # every process the child starts carries it, to be found and ended
    depth: int = 1  # isoagent parents above the child
    run_id: str = ""
    child: str = ""  # the child's id in its run


class HookPlan(msgspec.Struct, frozen=True, omit_defaults=True):
    """Which of an agent's steps the hooks are asked about (a ``HookCall`` each): those a
    hook's matcher names. Empty: none, and no round trip."""

    pre_tool: tuple[str, ...] = ()  # the names of the tools asked about before a call
    post_tool: tuple[str, ...] = ()  # and after one ("*" in either: every tool)
    stop: bool = False  # its end

    def asks(self, event: HookPoint, tool: str = "") -> bool:
        """Whether ``event`` of ``tool`` is asked about."""
        if event == "Stop":
            return self.stop
        tools = self.pre_tool if event == "PreToolUse" else self.post_tool
        return tool in tools or "*" in tools


class Task(msgspec.Struct, tag=True, omit_defaults=True):
    prompt: str
    agent: AgentSpec
    model: str
    workdir: str
    tmpdir: str  # "": the child is on another host and makes its own there
    limits: Limits = msgspec.field(default_factory=Limits)
    sandbox: SandboxPolicy = msgspec.field(default_factory=SandboxPolicy)
    identity: Identity = msgspec.field(default_factory=Identity)
    # seconds of silence after which either side counts the link as dead, each sending
    # a Heartbeat every third of it (0: a local pipe, whose end is seen, needs none)
    heartbeat: float = 0.0
    # folders the agent may use besides the workspace (--add-dir), absolute; the sandbox
    # gives them the workspace's access
    add_dirs: list[str] = []
    mcp_servers: list[McpServer] = []  # those whose tools agent.mcp_tools names
    # the agent types it may delegate to, name: description ({}: it has no Agent tool)
    subagents: dict[str, str] = {}
    trace: bool = False  # record spans and send them in the Result (telemetry is on)
    hooks: HookPlan = msgspec.field(default_factory=HookPlan)  # what it asks the parent's hooks
    # the conversation it goes on with (a finished child continued: SendMessage); [] fresh
    history: list[Message] = []


ModelErrorKind = Literal[
    "auth",
    "bad_request",
    "connection",  # the server could not be reached, or its answer was cut mid-way
    "rate_limit",  # 429
    "overloaded",  # 529
    "server",  # 500, 502, 503, 504
    "api",
    "budget",
    "replay",
    "cancelled",
]


class ModelError(msgspec.Struct, omit_defaults=True):
    """Why a model call failed; ``kind`` is machine-readable, ``message`` is for people.
    A model call the gateway retries (rate limit, overload, server, connection) fails with
    its kind only once its retry deadline has passed."""

    kind: ModelErrorKind
    message: str
    status_code: int = 0
    retry_after: float = 0.0  # seconds, as the server's retry-after said (0: it did not)


class ModelReply(msgspec.Struct, tag=True, omit_defaults=True):
    turn: int
    content: list[Block] = []
    stop_reason: str = ""
    usage: Usage = msgspec.field(default_factory=Usage)
    error: ModelError | None = None
    retries: int = 0  # refused or failed attempts the gateway retried before this answer
    model: str = ""  # the model that answered, when not the call's (--fallback-model)
    id: str = ""  # the API's id of the message (its message_start's)


class Cancel(msgspec.Struct, tag=True):
    reason: str


class McpReply(msgspec.Struct, tag=True, omit_defaults=True):
    """What an SDK server's tool answered an ``McpCall`` (its text content)."""

    id: int
    text: str
    is_error: bool = False


class HookReply(msgspec.Struct, tag=True, omit_defaults=True):
    """What the hooks decided of a ``HookCall``."""

    id: int
    # PreToolUse: the call does not run, ``reason`` is its result; PostToolUse: ``reason``
    # is added to the result; Stop: the agent goes on, with ``reason`` as the next message
    block: bool = False
    reason: str = ""
    input: dict[str, Any] | None = None  # PreToolUse: the input the tool runs with instead
    output: str | None = None  # PostToolUse: the result the model gets instead
    context: str = ""  # for the model, after the tool's result (additionalContext)
    stop: str | None = None  # the agent ends here (a hook's continue: false), and why


class TaskReply(msgspec.Struct, tag=True, omit_defaults=True):
    """What a ``TaskCall`` came to: the child's child's summary and facts, or why not."""

    id: int
    text: str
    is_error: bool = False


ParentFrame = Task | ModelReply | Cancel | Heartbeat | McpReply | HookReply | TaskReply
