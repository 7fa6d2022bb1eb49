"""Workspace trust, as Claude Code has it: a workspace's own files that would make isoagent
run something or grant something are used only once the user trusts that workspace.

Those files (``workspace_files``): ``.mcp.json`` (its MCP servers), ``.claude/settings.json``
and ``.claude/settings.local.json`` (their hooks, permissions, model, sandbox and MCP
approvals, which ``isoagent -p`` applies) and the agent files of ``.claude/agents/`` that
bring MCP servers of their own. A file is trusted (``decide``) when:

1. ``--trust`` is given (this run only; nothing recorded), or
2. isoagent's record holds its content's digest (``record.py``: ``isoagent trust``, or a
   yes to the question), or
3. Claude Code trusts the folder (``claude_record.py``) and, for ``.mcp.json``, approves
   every server in it: taken as the user's answer to a file isoagent has not seen, and
   recorded, so that a later change asks again (Claude Code's record is by path, not
   content), or
4. the user says yes to the question, asked only on a terminal (``isoagent run``, ``task``,
   ``batch``; never in ``-p``, which has nobody to ask).

A file that is not trusted is left out, said in one line once per run; the run goes on. What
the user passes (``--mcp-config``, ``--settings``, ``--agents``, ``--agents-dir``, the SDK's
options, ``~/.claude/``) is the user's own and is never asked about.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isoagent.parent.claude_code.user_files import read_regular
from isoagent.parent.trust import claude_record, record
from isoagent.protocol import AgentSpec

MCP_FILE = ".mcp.json"
SETTINGS_FILES = (".claude/settings.json", ".claude/settings.local.json")
# Claude Code's setting source of each (``--setting-sources``)
SETTING_SOURCES = {".claude/settings.json": "project", ".claude/settings.local.json": "local"}
AGENTS_DIR = Path(".claude") / "agents"
MAX_FILE = 4 * 1024 * 1024  # bytes read of one file: a config is a few KiB
# what of a settings file grants (the rest only takes away, or isoagent does not apply it)
GRANTING_SETTINGS = ("hooks", "model", "enableAllProjectMcpServers", "enabledMcpjsonServers")
GRANTING_PERMISSIONS = ("allow", "defaultMode", "additionalDirectories")


@dataclass(frozen=True)
class WorkspaceFile:
    """One file of the workspace that would run or grant something: its name in the
    workspace, its bytes as read (what is trusted is what is used), what it brings."""

    name: str
    data: bytes
    brings: tuple[str, ...]

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


# the question: (workspace, its files not trusted) -> whether the user trusts them
Ask = Callable[[Path, Sequence[WorkspaceFile]], bool]


@dataclass
class Trust:
    """One run's answer: which of the workspace's files it uses, and how each is trusted."""

    workdir: Path
    files: dict[str, WorkspaceFile] = field(default_factory=dict)  # used, bringing something
    how: dict[str, str] = field(default_factory=dict)  # trusted ones: how they came to be
    settings: tuple[str, ...] = ()  # the settings files the run applies (isoagent -p)

    def trusted(self, name: str) -> bool:
        """Whether file ``name`` may be used (one that brings nothing always may)."""
        return name not in self.files or name in self.how

    def skipped(self) -> list[WorkspaceFile]:
        return [f for name, f in self.files.items() if name not in self.how]

    def lines(self) -> list[str]:
        """One line for each file left out, for stderr."""
        return [
            f"{self.workdir} is not trusted: {file.name} left out ({'; '.join(file.brings)}); "
            f"`isoagent trust {self.workdir}` trusts it, --trust for one run"
            for file in self.skipped()
        ]


def workspace_files(
    workdir: Path, agents: Mapping[str, AgentSpec], *, settings: Sequence[str] = SETTINGS_FILES
) -> dict[str, WorkspaceFile]:
    """The files of ``workdir`` that would run or grant something, by name: ``.mcp.json``,
    the ``settings`` files, and the agent files among ``agents`` that bring MCP servers of
    their own."""
    found: dict[str, WorkspaceFile] = {}
    data = read_file(workdir / MCP_FILE)
    if data is not None:
        found[MCP_FILE] = WorkspaceFile(MCP_FILE, data, _mcp_brings(data))
    for name in settings:
        data = read_file(workdir / name)
        if data is not None:
            found[name] = WorkspaceFile(name, data, _settings_brings(data))
    own = (workdir / AGENTS_DIR).as_posix() + "/"
    for agent in agents.values():
        if agent.mcp_servers and agent.source.startswith(own):
            data = read_file(Path(agent.source))
            if data is not None:
                name = Path(agent.source).relative_to(workdir).as_posix()
                servers = ", ".join(
                    _server_text(s.name, s.command, s.args) for s in agent.mcp_servers
                )
                found[name] = WorkspaceFile(
                    name, data, (f"agent {agent.name}'s MCP servers {servers}",)
                )
    return {name: file for name, file in found.items() if file.brings}


def decide(
    workdir: Path,
    files: Mapping[str, WorkspaceFile],
    *,
    given: bool = False,
    ask: Ask | None = None,
    on_line: Callable[[str], None] = lambda line: None,
    settings: Sequence[str] = (),
) -> Trust:
    """Which of ``files`` (``workspace_files``') a run uses, as the module says: ``given``
    (``--trust``), the record, Claude Code's trust, then ``ask`` (None: nobody to ask).
    What is recorded, or cannot be, is told to ``on_line``; the lines of what is left out
    are ``Trust.lines``'s to say. ``settings``: the settings files the run applies."""
    trust = Trust(workdir, dict(files), settings=tuple(settings))
    recorded = {} if given else record.trusted_digests(workdir)
    for name, file in files.items():
        if given or recorded.get(name) == file.digest:
            trust.how[name] = "--trust" if given else "recorded"
    adopted = _claude_trusted(workdir, trust.skipped())
    if adopted:
        _record(workdir, adopted, on_line)
        folder = claude_record.trusting_folder(workdir)
        names = ", ".join(f.name for f in adopted)
        on_line(
            f"{names} trusted as Claude Code trusts {folder} ({claude_record.global_config()}); "
            "recorded: a change asks again"
        )
        trust.how.update(dict.fromkeys((f.name for f in adopted), "Claude Code"))
    untrusted = trust.skipped()
    if untrusted and ask is not None and ask(workdir, untrusted):
        _record(workdir, untrusted, on_line)
        trust.how.update(dict.fromkeys((f.name for f in untrusted), "answered yes"))
    return trust


def _record(workdir: Path, files: Iterable[WorkspaceFile], on_line: Callable[[str], None]) -> None:
    try:
        record.trust(workdir, {f.name: f.digest for f in files})
    except record.TrustRecordError as exc:
        on_line(f"warning: {exc}: trusted for this run only")


def _claude_trusted(workdir: Path, files: list[WorkspaceFile]) -> list[WorkspaceFile]:
    """Those of ``files`` that Claude Code's record trusts: all, in a folder whose trust
    dialog was accepted, but a ``.mcp.json`` with a server Claude Code would not start
    without asking."""
    if not files or claude_record.trusting_folder(workdir) is None:
        return []
    approvals = claude_record.mcp_approvals(workdir, settings_objects(workdir), trusted=True)
    adopted = []
    for file in files:
        if file.name == MCP_FILE:
            names = _json_object(file.data).get("mcpServers") or {}
            if not all(approvals.approves(name) for name in names):
                continue
        adopted.append(file)
    return adopted


def settings_objects(workdir: Path) -> list[dict[str, Any]]:
    """The workspace's settings files as JSON objects (a missing or broken one: {})."""
    return [_json_object(read_file(workdir / name) or b"") for name in SETTINGS_FILES]


def read_file(path: Path) -> bytes | None:
    """A regular file's bytes (the first ``MAX_FILE``), what trust is decided on; None when
    there is none (``read_regular``: a link is followed, a FIFO or a device not read)."""
    return read_regular(path, MAX_FILE)


def _json_object(data: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(data)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _mcp_brings(data: bytes) -> tuple[str, ...]:
    servers = _json_object(data).get("mcpServers")
    if not isinstance(servers, dict):
        return ("MCP servers, in a file that is not such JSON",)
    if not servers:
        return ()
    texts = []
    for name, entry in servers.items():
        entry = entry if isinstance(entry, dict) else {}
        command = entry.get("url") or entry.get("command")
        args = entry.get("args") if isinstance(entry.get("args"), list) else []
        text = _server_text(name, str(command), [str(a) for a in args or []])
        env = entry.get("env")
        if isinstance(env, dict) and env:
            text += f" with env {', '.join(map(str, env))}"
        texts.append(text)
    return (f"MCP servers {'; '.join(texts)}",)


def _server_text(name: str, command: str, args: Sequence[str]) -> str:
    return f"{name} ({' '.join([command, *args])})"


def _settings_brings(data: bytes) -> tuple[str, ...]:
    settings = _json_object(data)
    brings = [key for key in GRANTING_SETTINGS if settings.get(key)]
    permissions = settings.get("permissions")
    if isinstance(permissions, dict):
        brings += [f"permissions.{key}" for key in GRANTING_PERMISSIONS if permissions.get(key)]
    sandbox = settings.get("sandbox")
    if isinstance(sandbox, dict) and sandbox.get("network"):
        brings.append("sandbox.network")
    return tuple(brings)
