"""Load user-defined agent types from Claude Code's agent files.

An agent file is Markdown with YAML front matter::

    ---
    name: reviewer
    description: Reviews a diff for bugs.
    tools: Read, Grep, Glob      # or a YAML list; absent = every base tool
    model: sonnet                # optional; "inherit" or absent = the parent's model
    maxTurns: 20                 # optional positive int
    ---
    You are a careful code reviewer...

The Markdown body is the system prompt; unknown front-matter keys are ignored.

Sources, lowest precedence first (a later one replaces an earlier one by name):

1. the built-in agents (``child/agent/builtin_agents.py``);
2. ``~/.claude/agents/*.md``;
3. each ``--agents-dir`` directory, in the order given;
4. ``<workspace>/.claude/agents/*.md``.

Within one directory files load in name order. A bad file is reported as an
:class:`AgentFileError` (``path:line: message``) and the other files still load.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import msgspec
import yaml
from yaml.reader import ReaderError

from isoagent.child.agent.builtin_agents import BASE_TOOLS, BUILTIN_AGENTS, TASK_TOOL
from isoagent.protocol import AgentSpec

_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_PATH_KEY_RE = re.compile(r"at `\$\.([^`.\[]+)")
_DELIMITER = "---"

# Claude Code tool names -> ours; our own names map to themselves.
_TOOL_NAMES: dict[str, str] = {
    "Read": "read_file",
    "Write": "write_file",
    "Edit": "edit_file",
    "MultiEdit": "edit_file",
    "Bash": "bash",
    "Glob": "glob",
    "Grep": "grep",
    "LS": "glob",
    **{tool: tool for tool in BASE_TOOLS},
}


class AgentFileError(msgspec.Struct, frozen=True):
    """A malformed agent file: where, and what is wrong."""

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


class AgentCatalog(msgspec.Struct):
    """Every agent type available, plus what went wrong while loading them."""

    agents: dict[str, AgentSpec]
    warnings: list[str]
    errors: list[AgentFileError]


class FrontMatter(msgspec.Struct):
    """The front-matter keys we use, typed as Claude Code documents them."""

    name: str
    description: str
    tools: str | list[str] | None = None
    model: str | None = None
    max_turns: Annotated[int, msgspec.Meta(gt=0)] | None = msgspec.field(
        default=None, name="maxTurns"
    )


def load_agents(
    workdir: Path, *, extra_dirs: Sequence[Path] = (), home: Path | None = None
) -> AgentCatalog:
    """Built-in agents overridden by agent files, in the precedence the module doc gives."""
    home = Path.home() if home is None else home
    catalog = AgentCatalog(agents=dict(BUILTIN_AGENTS), warnings=[], errors=[])
    dirs = [home / ".claude" / "agents", *extra_dirs, workdir / ".claude" / "agents"]
    for directory in dirs:
        if not directory.is_dir():
            continue
        seen: dict[str, Path] = {}
        for path in sorted(p for p in directory.glob("*.md") if p.is_file()):
            try:
                spec, warnings = parse_agent_file(path)
            except AgentFileErrorException as exc:
                catalog.errors.append(exc.error)
                continue
            catalog.warnings.extend(warnings)
            if spec.name in seen:
                catalog.warnings.append(
                    f"{path}: agent {spec.name!r} is also defined in {seen[spec.name]}; "
                    f"using {path}"
                )
            seen[spec.name] = path
            catalog.agents[spec.name] = spec
    return catalog


def parse_agent_file(path: Path) -> tuple[AgentSpec, list[str]]:
    """Parse one agent file into an AgentSpec and its warnings; raise on a malformed file."""

    def fail(line: int, message: str) -> AgentFileErrorException:
        return AgentFileErrorException(AgentFileError(str(path), line, message))

    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise fail(1, f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise fail(raw.count(b"\n", 0, exc.start) + 1, "not valid UTF-8") from None

    lines = text.split("\n")
    if lines[0].rstrip() != _DELIMITER:
        raise fail(1, "no front matter: the file must start with a '---' line")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == _DELIMITER), None)
    if end is None:
        raise fail(1, "unterminated front matter: no closing '---' line")
    front = "\n".join(lines[1:end])

    def file_line(index: int) -> int:
        """The file's line number for an offset into the front matter (which starts on line 2)."""
        return 2 + front.count("\n", 0, index)

    try:
        node, data = _compose_and_load(front)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise fail(file_line(mark.index) if mark else 1, _yaml_message(exc)) from None
    except ReaderError as exc:
        raise fail(file_line(exc.position), f"invalid YAML: {exc.reason}") from None
    except yaml.YAMLError as exc:
        raise fail(1, f"invalid YAML: {exc}") from None
    except RecursionError:
        raise fail(1, "invalid YAML: front matter nests too deeply") from None
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise fail(1, "front matter must be a YAML mapping of keys to values")

    key_lines = {
        key.value: file_line(key.start_mark.index)
        for key, _ in node.value
        if isinstance(key, yaml.ScalarNode)
    }
    try:
        meta = msgspec.convert({k: v for k, v in data.items() if isinstance(k, str)}, FrontMatter)
    except msgspec.ValidationError as exc:
        match = _PATH_KEY_RE.search(str(exc))
        raise fail(key_lines.get(match.group(1), 1) if match else 1, str(exc)) from None

    if not _NAME_RE.fullmatch(meta.name):
        raise fail(
            key_lines.get("name", 1),
            f"invalid name {meta.name!r}: use 1-64 letters, digits, '-' or '_'",
        )
    if not meta.description.strip():
        raise fail(key_lines.get("description", 1), "empty description")
    body = "\n".join(lines[end + 1 :]).strip()
    if not body:
        raise fail(end + 1, "empty system prompt (the Markdown body after the front matter)")

    warnings: list[str] = []
    tools = _map_tools(meta.tools, path, warnings)
    model = meta.model.strip() if meta.model else None
    spec = AgentSpec(
        name=meta.name,
        description=meta.description.strip(),
        system_prompt=body,
        tools=tools,
        model=None if model in (None, "", "inherit") else model,
        max_turns=meta.max_turns,
        source=str(path),
    )
    return spec, warnings


def _compose_and_load(text: str) -> tuple[yaml.Node | None, object]:
    """The YAML document's node tree (for key line numbers) and its Python value."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        return node, loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    """A one-line YAML error message, without PyYAML's position lines."""
    parts = [part for part in (exc.context, exc.problem) if part]
    return "invalid YAML: " + (", ".join(parts) or "syntax error")


def _map_tools(tools: str | list[str] | None, path: Path, warnings: list[str]) -> list[str]:
    """Our tool names for the file's ``tools`` value, deduplicated, in order."""
    if tools is None:
        return list(BASE_TOOLS)
    names = tools.split(",") if isinstance(tools, str) else tools
    result: list[str] = []
    for name in (n.strip() for n in names):
        if not name:
            continue
        if name.lower() == TASK_TOOL:
            warnings.append(f"{path}: tool {name!r} dropped: child agents never get 'task'")
        elif name not in _TOOL_NAMES:
            warnings.append(f"{path}: tool {name!r} is not available in isoagent; dropped")
        elif _TOOL_NAMES[name] not in result:
            result.append(_TOOL_NAMES[name])
    return result
