"""Load user-defined agent types from Claude Code's agent files, read as Claude Code reads them.

An agent file is Markdown with YAML front matter::

    ---
    name: reviewer
    description: Reviews a diff for bugs.
    tools: Read, Grep, Bash(git:*)   # or a YAML list; absent = every base tool
    disallowedTools: Write           # taken away; a name isoagent does not know rejects the file
    model: sonnet                    # an alias or a model id; "inherit" or absent = the parent's
    permissionMode: plan             # plan: read-only (no write tools, read-only sandbox)
    maxTurns: 20
    effort: high                     # its requests' output_config.effort
    background: true                 # its children run in the background
    mcpServers:                      # MCP servers: a name the run configures (.mcp.json,
      - github                       # --mcp-config), or the agent's own; without `tools`,
      - ctx:                         # every tool of each (with it, what it names)
          command: ctx-server
    ---
    You are a careful code reviewer...

The Markdown body is the system prompt. Parsing is as lenient as Claude Code's: a value
that is not valid YAML on its own (``description: Use this when: ...``, ``**bold**``) is
read as the literal text after the colon; names may hold spaces and dots; values of the
wrong type for ``tools``, ``model`` or ``maxTurns`` are ignored; unknown keys are ignored;
an ``mcpServers`` that is not such a list, or whose inline server is not a stdio, http or
sse one, rejects the file, and so does a field isoagent cannot honour (``memory``, ``skills``,
``hooks``, ``isolation``: ``REFUSED_FIELDS``), an ``effort`` that is not a level, or a tool
by isoagent's name of old (``read_file``: "did you mean Read"). Tools go by Claude Code's
names, which are isoagent's own.
A file whose front matter cannot be read, or that lacks a name or a description, is
rejected with one line (``path:line: message``); Markdown files without front matter
(READMEs) are not agent files. Everything else worth knowing (tools isoagent lacks, names
defined twice) goes into at most one summary line.

Sources, lowest precedence first (a later one replaces an earlier one by name):

1. the built-in agents (``child/agent/builtin_agents.py``);
2. ``~/.claude/agents/`` and its subfolders;
3. each ``--agents-dir`` directory (and subfolders), in the order given;
4. ``<workspace>/.claude/agents/`` and its subfolders.

Within one directory files load in path order.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import yaml
from yaml.reader import ReaderError

from isoagent.child.agent.builtin_agents import (
    BASE_TOOLS,
    BUILTIN_AGENTS,
    SEND_MESSAGE,
    TASK_ALIASES,
    WRITE_TOOLS,
)
from isoagent.child.agent.tools import TOOL_CLASSES
from isoagent.parent.claude_code.mcp_servers import PREFIX as MCP_PREFIX
from isoagent.parent.claude_code.mcp_servers import agent_entry, server_of, whole_server
from isoagent.parent.claude_code.user_files import markdown_files
from isoagent.parent.model.aliases import agent_model
from isoagent.protocol import AgentSpec, McpServer

_DELIMITER = "---"
MAX_AGENT_FILE = 1024 * 1024  # bytes; Claude Code's agent files are a few KiB
_TOP_LEVEL_KEY = re.compile(r"^([A-Za-z_][\w-]*)[ \t]*:[ \t]+(\S.*?)[ \t]*$")
# "Read, Grep", "Read Grep", "Bash(git log:*)": names, each with an optional (rule)
_TOOL_ENTRY = re.compile(r"[^,\s()\[\]]+(?:\([^)]*\))?")
_RULE = re.compile(r"^([^(]+)\((.*)\)$")


class _AliasRefused(yaml.composer.ComposerError):
    """An alias in an agent file: refused, never read as literal text."""


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without aliases (``*name``): an agent file needs none, and a few hundred bytes
    of aliases to aliases (a "billion laughs") expand past any memory or time when read.
    Refusing them at composition bounds the work by the file's size."""

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise _AliasRefused(None, None, "aliases (*name) are not allowed in agent files", mark)
        return super().compose_node(parent, index)  # type: ignore[no-untyped-call]


# isoagent's names before it took Claude Code's: refused, with the name to use instead
RENAMED = {
    "bash": "Bash", "read_file": "Read", "write_file": "Write", "edit_file": "Edit",
    "glob": "Glob", "grep": "Grep", "todo_write": "TodoWrite", "web_fetch": "WebFetch",
    "web_search": "WebSearch", "task": "Agent", "send_message": "SendMessage",
}  # fmt: skip
EFFORTS = ("low", "medium", "high", "max")
# fields of Claude Code's agents that isoagent cannot honour: an agent that sets one is
# refused with the reason, not run without it. initialPrompt and color are accepted: Claude
# Code uses them only for an agent that is the main session's, never a subagent
REFUSED_FIELDS = {
    "memory": "isoagent's agents keep no memory between runs",
    "skills": "isoagent has no skills",
    "hooks": "isoagent runs an agent's own hooks nowhere (give them in --settings)",
    "isolation": "each isoagent child is isolated by its own sandbox, not a git worktree",
}
# Claude Code tools isoagent does not give an agent (MultiEdit and LS: older Claude Code's,
# which the current one does not know either); naming them is not an error
KNOWN_ELSEWHERE = frozenset(
    {
        *TASK_ALIASES, SEND_MESSAGE, "TodoRead", "MultiEdit", "LS",
        "NotebookEdit", "NotebookRead", "BashOutput", "KillShell", "KillBash", "ExitPlanMode",
        "SlashCommand", "Skill", "AskUserQuestion", "ListMcpResourcesTool",
        "ReadMcpResourceTool", "LSP", "ToolSearch", "TaskStop", "Monitor", "TaskCreate",
        "TaskGet", "TaskList", "TaskUpdate", "TaskOutput",
    }
)  # fmt: skip
PLAN_MODE = "plan"


class AgentFileError(msgspec.Struct, frozen=True):
    """A rejected agent file: where, and what is wrong."""

    path: str
    line: int
    message: str

    def describe(self) -> str:
        """The error as ``path:line: message``."""
        return f"{self.path}:{self.line}: {self.message}"

    def __str__(self) -> str:
        return self.describe()


class AgentFileErrorException(Exception):
    """Raised by :func:`parse_agent_file`; carries the :class:`AgentFileError`."""

    def __init__(self, error: AgentFileError) -> None:
        super().__init__(error.describe())
        self.error = error


class NotAnAgentFile(Exception):
    """Markdown without front matter: a README in an agents folder, not an agent."""


class AgentCatalog(msgspec.Struct):
    """Every agent type available; ``warnings`` holds at most one summary line."""

    agents: dict[str, AgentSpec]
    warnings: list[str]
    errors: list[AgentFileError]


class Notes:
    """What a catalog's summary line tells: tools left out, files ignored, names redefined."""

    def __init__(self) -> None:
        self.missing_tools: Counter[str] = Counter()
        self.not_agents = 0
        self.redefined: list[str] = []

    def summary(self) -> str | None:
        parts = []
        if self.missing_tools:
            named = ", ".join(
                f"{tool} ({count} agent{'s' * (count > 1)})"
                for tool, count in sorted(self.missing_tools.items())
            )
            parts.append(f"tools isoagent does not have were left out: {named}")
        if self.redefined:
            parts.append(f"defined again by a later file: {', '.join(sorted(self.redefined))}")
        if self.not_agents:
            parts.append(f"{self.not_agents} Markdown file(s) without front matter ignored")
        return "agent files: " + "; ".join(parts) if parts else None


def load_agents(
    workdir: Path,
    *,
    extra_dirs: Sequence[Path] = (),
    home: Path | None = None,
    user: bool = True,
    project: bool = True,
) -> AgentCatalog:
    """Built-in agents overridden by agent files, in the precedence the module doc gives;
    ``user``/``project``: whether the home's and the workspace's folders are read."""
    home = Path.home() if home is None else home
    catalog = AgentCatalog(agents=dict(BUILTIN_AGENTS), warnings=[], errors=[])
    notes = Notes()
    dirs = [
        *([home / ".claude" / "agents"] if user else []),
        *extra_dirs,
        *([workdir / ".claude" / "agents"] if project else []),
    ]
    for directory in dirs:
        seen: set[str] = set()
        for path in markdown_files(directory):
            try:
                spec, missing = parse_agent_file(path)
            except AgentFileErrorException as exc:
                catalog.errors.append(exc.error)
                continue
            except NotAnAgentFile:
                notes.not_agents += 1
                continue
            notes.missing_tools.update(set(missing))
            if spec.name in seen:
                notes.redefined.append(spec.name)
            seen.add(spec.name)
            catalog.agents[spec.name] = spec
    if summary := notes.summary():
        catalog.warnings.append(summary)
    return catalog


def parse_agent_file(path: Path) -> tuple[AgentSpec, list[str]]:
    """One agent file as an AgentSpec, and the Claude Code tools it names that isoagent
    lacks. Raises AgentFileErrorException for a rejected file, NotAnAgentFile for a
    Markdown file without front matter."""

    def fail(line: int, message: str) -> AgentFileErrorException:
        return AgentFileErrorException(AgentFileError(str(path), line, message))

    try:
        with path.open("rb") as file:
            raw = file.read(MAX_AGENT_FILE + 1)
    except OSError as exc:
        raise fail(1, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_AGENT_FILE:  # a repository's file: read no further than that
        raise fail(1, f"larger than {MAX_AGENT_FILE // 1024} KiB: not an agent file")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise fail(raw.count(b"\n", 0, exc.start) + 1, "not valid UTF-8") from None

    lines = text.replace("\r\n", "\n").split("\n")
    if lines[0].rstrip() != _DELIMITER:
        raise NotAnAgentFile(str(path))
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == _DELIMITER), None)
    if end is None:
        raise fail(1, "unterminated front matter: no closing '---' line")
    data, key_lines = read_front_matter(lines[1:end], fail)

    def field_error(key: str, message: str) -> AgentFileErrorException:
        return fail(key_lines.get(key, 1), message)

    name, description = data.get("name"), data.get("description")
    if not isinstance(name, str) or not name.strip() or not name.isprintable():
        raise field_error("name", "`name` must be a non-empty line of text")
    if not isinstance(description, str) or not description.strip():
        raise field_error("description", "`description` must be non-empty text")
    try:
        return build_spec(
            name.strip(),
            description.strip(),
            "\n".join(lines[end + 1 :]).strip(),
            data,
            source=str(path),
        )
    except InvalidAgent as exc:
        raise field_error(exc.key, exc.message) from None


def read_front_matter(lines: list[str], fail: Any) -> tuple[dict[str, Any], dict[str, int]]:
    """The front matter's keys and values, and the file line of each key.

    YAML first; where that fails, each top-level ``key: value`` whose value is no valid
    YAML by itself is read as the literal text (Claude Code's leniency), and the
    whole is parsed once more. The first attempt's error is the one reported.
    """
    try:
        return _load_mapping("\n".join(lines), fail)
    except AgentFileErrorException as first:
        repaired = [_quote_if_invalid(line) for line in lines]
        if repaired == lines:
            raise
        try:
            return _load_mapping("\n".join(repaired), fail)
        except AgentFileErrorException:
            raise first from None


def _quote_if_invalid(line: str) -> str:
    match = _TOP_LEVEL_KEY.match(line)
    if not match:
        return line
    try:
        yaml.load(f"key: {match.group(2)}", Loader=_NoAliasLoader)
        return line
    except _AliasRefused:
        return line
    except (yaml.YAMLError, RecursionError):
        return f"{match.group(1)}: {json.dumps(match.group(2))}"


def _load_mapping(front: str, fail: Any) -> tuple[dict[str, Any], dict[str, int]]:
    def file_line(index: int) -> int:
        """The file's line number for an offset into the front matter (which starts on line 2)."""
        return 2 + front.count("\n", 0, index)

    loader = None
    try:
        loader = _NoAliasLoader(front)
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise fail(file_line(mark.index) if mark else 1, _yaml_message(exc)) from None
    except ReaderError as exc:
        raise fail(file_line(exc.position), f"invalid YAML: {exc.reason}") from None
    except yaml.YAMLError as exc:
        raise fail(1, f"invalid YAML: {exc}") from None
    except RecursionError:
        raise fail(1, "invalid YAML: front matter nests too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise fail(1, "front matter must be a YAML mapping of keys to values")
    key_lines = {
        key.value: file_line(key.start_mark.index)
        for key, _ in node.value
        if isinstance(key, yaml.ScalarNode)
    }
    return {k: v for k, v in data.items() if isinstance(k, str)}, key_lines


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    """A one-line YAML error message, without PyYAML's position lines."""
    parts = [part for part in (exc.context, exc.problem) if part]
    return "invalid YAML: " + (", ".join(parts) or "syntax error")


class InvalidAgent(Exception):
    """An agent definition isoagent refuses; ``key`` is the field at fault."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def build_spec(
    name: str, description: str, prompt: str, fields: Mapping[str, Any], *, source: str
) -> tuple[AgentSpec, list[str]]:
    """An AgentSpec from an agent's fields (a file's front matter or an ``--agents``
    entry), and the Claude Code tools it names that isoagent lacks."""
    missing: list[str] = []
    mcp: list[str] = []
    listed, own = _mcp_servers(fields.get("mcpServers"))
    tools = fields.get("tools")
    named = {_split_rule(entry)[0] for entry in tool_entries(tools)}
    kept_from = {_split_rule(entry)[0] for entry in tool_entries(fields.get("disallowedTools"))}
    # nesting is the type's: Claude Code's Task (or Agent) among its tools, or no tools list
    delegates = not isinstance(tools, str | list) or bool(named & TASK_ALIASES)
    if isinstance(tools, str | list):
        granted, allow = _grant(tool_entries(tools), missing, mcp)
    else:  # absent, or of a type Claude Code ignores too
        granted, allow = list(BASE_TOOLS), []
        mcp += [MCP_PREFIX + name for name in listed]  # with `tools`, what it names
    deny = _take_away(tool_entries(fields.get("disallowedTools")), granted, mcp)
    if fields.get("permissionMode") == PLAN_MODE:
        granted = [tool for tool in granted if tool not in WRITE_TOOLS]
    model = fields.get("model")
    turns = fields.get("maxTurns")
    for key, why in REFUSED_FIELDS.items():
        if fields.get(key) not in (None, False, [], {}, ""):
            raise InvalidAgent(key, f"{key} is not supported: {why}")
    effort = fields.get("effort")
    if effort is not None and effort not in EFFORTS:
        raise InvalidAgent("effort", f"effort must be one of {', '.join(EFFORTS)}, not {effort!r}")
    spec = AgentSpec(
        name=name,
        description=description,
        system_prompt=prompt,
        tools=granted,
        model=agent_model(model) if isinstance(model, str) else None,
        max_turns=turns if isinstance(turns, int) and turns > 0 else None,
        source=source,
        bash_allow=allow if "Bash" in granted else [],
        bash_deny=deny if "Bash" in granted else [],
        mcp_tools=mcp,
        mcp_servers=own,
        effort=effort or "",
        background=fields.get("background") is True,
        delegates=delegates and not kept_from & TASK_ALIASES,
    )
    return spec, missing


def _mcp_servers(value: object) -> tuple[list[str], list[McpServer]]:
    """An ``mcpServers`` value: the names of the servers it lists, and those it defines
    inline (the agent's own). Raises InvalidAgent for a malformed one."""
    if value is None:
        return [], []
    if not isinstance(value, list):
        raise InvalidAgent(
            "mcpServers", "mcpServers must be a list of server names or {name: {command, ...}}"
        )
    names: list[str] = []
    own: dict[str, McpServer] = {}
    for entry in value:
        try:
            name, server = agent_entry(entry)
        except ValueError as exc:
            raise InvalidAgent("mcpServers", str(exc)) from None
        if name not in names:
            names.append(name)
        if server is not None:
            own[name] = server
    return names, list(own.values())


def tool_entries(value: object) -> list[str]:
    """A tools value (``"Read, Bash(git:*)"`` or a list) as its entries."""
    if isinstance(value, str):
        return _TOOL_ENTRY.findall(value)
    if isinstance(value, list):
        return [str(item).strip() for item in value if str(item).strip()]
    return []


def _split_rule(entry: str) -> tuple[str, str | None]:
    """``Bash(git:*)`` -> ("Bash", "git:*"); ``Read`` -> ("Read", None)."""
    match = _RULE.match(entry)
    return (match.group(1).strip(), match.group(2).strip()) if match else (entry, None)


def _grant(entries: list[str], missing: list[str], mcp: list[str]) -> tuple[list[str], list[str]]:
    """The tools a ``tools`` list gives, in order, and the Bash allow rules (none: any
    command); the MCP tools it names go to ``mcp``. A rule isoagent cannot enforce
    (``Read(src/**)``) grants nothing."""
    granted: list[str] = []
    rules: list[str] = []
    unrestricted_bash = False
    check_names(entries, "tools")
    for entry in entries:
        tool, rule = _split_rule(entry)
        tool = whole_server(tool)
        if tool.startswith(MCP_PREFIX) and rule is None:
            mcp.append(tool)
            continue
        if tool not in TOOL_CLASSES:
            if tool not in TASK_ALIASES:  # the type's nesting: its ``delegates``
                missing.append(tool)
            continue
        if rule is not None and rule not in ("", "*") and tool != "Bash":
            missing.append(f"{tool}(...)")
            continue
        if tool == "Bash":
            if rule in (None, "", "*"):
                unrestricted_bash = True
            else:
                rules.append(rule)
        if tool not in granted:
            granted.append(tool)
    return granted, [] if unrestricted_bash else rules


def check_names(entries: Iterable[str], key: str) -> None:
    """Refuse (InvalidAgent) an entry that names a tool by isoagent's name of old, with the
    name to use: a rule meant to give or keep away a tool must not miss it silently."""
    for entry in entries:
        tool = _split_rule(entry)[0]
        if tool in RENAMED:
            raise InvalidAgent(
                key,
                f"{key} names {tool!r}: did you mean {RENAMED[tool]}? (tools go by "
                "Claude Code's names)",
            )


def _take_away(entries: list[str], granted: list[str], mcp: list[str]) -> list[str]:
    """Remove what ``disallowedTools`` names from ``granted`` and ``mcp``; return the bash
    deny rules. A name isoagent does not know is refused: it cannot keep away what it
    cannot name."""
    check_names(entries, "disallowedTools")
    deny: list[str] = []
    for entry in entries:
        tool, rule = _split_rule(entry)
        tool = whole_server(tool)
        if tool.startswith(MCP_PREFIX):  # itself, or a whole server's: every tool of it
            mcp[:] = [t for t in mcp if t != tool and not t.startswith(f"{tool}__")]
            whole = MCP_PREFIX + server_of(tool)
            if whole != tool and whole in mcp:
                raise InvalidAgent(
                    "disallowedTools",
                    f"disallowedTools names {tool!r} of a server whose tools are all given "
                    f"({whole}); name in tools those to give instead",
                )
            continue
        if tool not in TOOL_CLASSES:
            if tool in KNOWN_ELSEWHERE:
                continue  # never given anyway
            raise InvalidAgent(
                "disallowedTools",
                f"disallowedTools names {tool!r}, a tool isoagent does not know; refusing the "
                "agent rather than guessing what to keep from it",
            )
        if tool == "Bash" and rule not in (None, "", "*"):
            deny.append(rule)
        elif tool in granted:  # a rule on another tool: the whole tool goes
            granted.remove(tool)
    return deny


def inline_agents(text: str) -> dict[str, AgentSpec]:
    """``--agents JSON``: ``{"name": {"description", "prompt", "tools": [...], ...}}``, as
    Claude Code takes it; raises ValueError with a one-line reason."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object of agent names to definitions")
    agents: dict[str, AgentSpec] = {}
    for name, fields in data.items():
        if not isinstance(fields, dict):
            raise ValueError(f"{name}: expected an object")
        for key in ("description", "prompt"):
            if not isinstance(fields.get(key), str):
                raise ValueError(f"{name}.{key}: expected a string")
        for key in ("tools", "disallowedTools", "mcpServers"):
            if key in fields and not isinstance(fields[key], list):
                raise ValueError(f"{name}.{key}: expected an array")
        try:
            spec, _ = build_spec(
                name, fields["description"], fields["prompt"], fields, source="--agents"
            )
        except InvalidAgent as exc:
            raise ValueError(f"{name}: {exc.message}") from None
        agents[name] = spec
    return agents
