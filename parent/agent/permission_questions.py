"""What Claude Code asks the claude-agent-sdk's ``can_use_tool`` about a call, and what it
does not ask about at all.

Claude Code runs a Bash command without asking when it only reads, and only inside the
working folders: ``ls``, ``git status``, ``grep -r x .`` run; ``cat /etc/hostname``,
``touch x``, ``ls > out.txt`` are asked. A question carries Claude Code's suggestions (the
``PermissionUpdate``s an app may hand back to allow such calls from now on), the path that
made it a question, and a short description.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from isoagent.child.agent.builtin_agents import WRITE_TOOLS
from isoagent.child.agent.tools.bash_rules import CommandRefused, check_git, simple_commands

# programs that read and print, and change nothing (with the options checked below)
_READERS = frozenset(
    {"ls", "pwd", "echo", "cat", "head", "tail", "wc", "grep", "rg", "stat", "file", "du",
     "which", "date", "tree", "find", "git", "true", "basename", "dirname", "realpath"}
)  # fmt: skip
_FIND_ACTS = frozenset({"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0",
                        "-fprintf", "-fls"})  # fmt: skip
_GIT_READS = frozenset({"status", "log", "diff", "show", "rev-parse", "ls-files", "blame"})
# programs that change files: a question about one suggests acceptEdits, as Claude Code's does
_FILE_WRITERS = frozenset({"touch", "rm", "rmdir", "mkdir", "mv", "cp", "ln", "chmod", "tee"})


def reads_only(command: object, places: Sequence[Path]) -> bool:
    """Whether Claude Code runs Bash ``command`` unasked: every simple command in it is a
    reader (``find`` without an action, ``git`` reading), with no redirection, and every
    path it names is in ``places`` (the working folder first)."""
    if not isinstance(command, str):
        return False
    try:
        commands = simple_commands(command)
    except CommandRefused:
        return False
    return bool(commands) and all(_reads(words, places) for words in commands)


def _reads(words: list[str], places: Sequence[Path]) -> bool:
    name = words[0]
    if name not in _READERS or (name == "find" and _FIND_ACTS & set(words)):
        return False
    if name == "tree" and any(w.startswith("-o") for w in words):  # tree -o FILE writes
        return False
    if name == "git":
        if len(words) < 2 or words[1] not in _GIT_READS:
            return False
        try:
            check_git(words)
        except CommandRefused:
            return False
    return not _outside(words[1:], places)


def _outside(args: list[str], places: Sequence[Path]) -> list[str]:
    """The paths among ``args`` (an option's value too) outside every one of ``places``."""
    found = []
    for arg in args:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if value.startswith("-") or not ("/" in value or value.startswith("~") or ".." in value):
            continue
        path = Path(os.path.normpath(places[0] / os.path.expanduser(value)))
        if not any(path.is_relative_to(place) for place in places):
            found.append(str(path))
    return found


def question(tool: str, args: dict[str, Any], places: Sequence[Path]) -> dict[str, Any]:
    """The fields of Claude Code's ``can_use_tool`` request besides the tool and its input:
    ``permission_suggestions``, ``blocked_path``, ``decision_reason``, a description."""
    workdir = places[0]
    if tool == "Bash":
        command = str(args.get("command", ""))
        asked: dict[str, Any] = {"description": str(args.get("description") or command)}
        suggested = [_rule("Bash", command, "localSettings")]
        try:
            words = [w for simple in simple_commands(command) for w in simple]
        except CommandRefused:
            words = []
        if outside := _outside(words[1:], places):
            folder = outside[0] if os.path.isdir(outside[0]) else os.path.dirname(outside[0])
            suggested.append(_rule("Read", f"/{folder.rstrip('/')}/**", "session"))
            asked["blocked_path"] = outside[0]
        elif words and words[0] in _FILE_WRITERS:
            suggested += [_folders([workdir]), _mode("acceptEdits")]
            paths = [w for w in words[1:] if not w.startswith("-")]
            if paths:
                asked["blocked_path"] = str(Path(os.path.normpath(workdir / paths[0])))
        return {**asked, "permission_suggestions": suggested}
    if tool in WRITE_TOOLS and isinstance(args.get("file_path"), str):
        path = Path(os.path.normpath(workdir / os.path.expanduser(args["file_path"])))
        asked = {
            "description": _shown(path, workdir),
            "permission_suggestions": [_mode("acceptEdits")],
        }
        if not any(path.is_relative_to(place) for place in places):
            asked["permission_suggestions"].append(_folders([path.parent]))
            asked |= {"decision_reason": "Path is outside allowed working directories",
                      "decision_reason_type": "workingDir"}  # fmt: skip
        return asked
    return {"permission_suggestions": [_rule(tool, "", "localSettings")]}


def _rule(tool: str, content: str, where: str) -> dict[str, Any]:
    rule = {"toolName": tool, **({"ruleContent": content} if content else {})}
    return {"type": "addRules", "rules": [rule], "behavior": "allow", "destination": where}


def _folders(folders: list[Path]) -> dict[str, Any]:
    return {"type": "addDirectories", "directories": [str(f) for f in folders],
            "destination": "session"}  # fmt: skip


def _mode(mode: str) -> dict[str, Any]:
    return {"type": "setMode", "mode": mode, "destination": "session"}


def _shown(path: Path, workdir: Path) -> str:
    """A file as Claude Code names it in a question: from the working folder, or ``~``."""
    if path.is_relative_to(workdir):
        return str(path.relative_to(workdir))
    home = Path(os.path.expanduser("~"))
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) else str(path)
