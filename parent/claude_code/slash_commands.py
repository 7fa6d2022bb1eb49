"""Claude Code's slash commands, as print mode and the claude-agent-sdk send them: a prompt
``/NAME ARGS``.

``/clear`` starts a new conversation (a new session id; the SDK hears a
``conversation_reset``). A custom command is a markdown file of ``.claude/commands/``, the
project's or Claude Code's folder's (``sub/name.md`` is ``/sub:name``; the project's wins a
name both have), or of a ``--plugin-dir`` plugin's ``commands/`` (``/plugin:name``): its
body, with ``$ARGUMENTS`` (and ``$1``, ``$2``...) filled in, is the prompt, after a note
naming the command, as Claude Code sends it; its front matter may give a ``description``,
an ``argument-hint`` and a ``model``. A body with a shell line (``!`command```) is
refused: isoagent runs no command a file names before the model asks.
Any other ``/NAME`` is refused by name; a prompt that is a path (``/tmp/x ...``) is a prompt.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isoagent.parent.claude_code.user_files import config_dir, front_matter, markdown_files, uses

CLEAR = "clear"
BUILT_IN = {CLEAR: "Clear the conversation: the next message starts a new session"}
_INVOKED = re.compile(r"/([A-Za-z0-9_][\w:.-]*)(?:\s+(.*))?", re.S)
_SHELL_LINE = re.compile(r"!`[^`]*`")


class UnknownCommand(ValueError):
    """A prompt names a slash command isoagent does not have (or cannot run)."""


@dataclass(frozen=True)
class Command:
    name: str
    description: str
    argument_hint: str = ""
    body: str = ""  # "": a built-in
    model: str = ""  # the model its run uses ("": the session's)
    source: str = ""  # project or user

    def prompt(self, arguments: str) -> str:
        """The prompt the command is, for ``arguments``, as Claude Code sends it."""
        words = arguments.split()
        body = self.body.replace("$ARGUMENTS", arguments)
        body = re.sub(r"\$(\d+)", lambda m: _nth(words, int(m[1])), body)
        note = (
            f"<command-message>{self.name}</command-message>\n"
            f"<command-name>/{self.name}</command-name>\n"
            f"<command-args>{arguments}</command-args>"
        )
        return f"{note}\n\n{body.strip()}"


def _nth(words: list[str], n: int) -> str:
    return words[n - 1] if 0 < n <= len(words) else ""


def load_commands(
    workdir: Path,
    sources: Sequence[str] | None,
    warn: Callable[[str], None],
    plugins: Sequence[tuple[str, str]] = (),
) -> dict[str, Command]:
    """The commands a prompt may invoke: the built-ins, the plugins' (``(name, folder)``),
    the user's, then the project's; a file that cannot be read is said to ``warn`` and left
    out."""
    commands = {name: Command(name, about) for name, about in BUILT_IN.items()}
    places = [
        *((f"plugin:{name}", Path(folder, "commands")) for name, folder in plugins),
        *([("user", config_dir() / "commands")] if uses(sources, "user") else []),
        *([("project", workdir / ".claude" / "commands")] if uses(sources, "project") else []),
    ]
    for source, folder in places:
        plugin = source.removeprefix("plugin:") if source.startswith("plugin:") else ""
        for path in markdown_files(folder):
            name = ":".join(
                (*([plugin] if plugin else []), *path.relative_to(folder).with_suffix("").parts)
            )
            try:
                data, body = front_matter(path)
            except (OSError, ValueError) as exc:
                warn(f"warning: command /{name} is not used: {exc}")
                continue
            if name in BUILT_IN:
                warn(f"warning: command /{name} ({path}) is not used: /{name} is built in")
                continue
            first = next((line.strip() for line in body.splitlines() if line.strip()), "")
            about = str(data.get("description") or first)
            commands[name] = Command(
                name, f"{about} ({source})", _hint(data.get("argument-hint")), body,
                str(data.get("model") or ""), source,
            )  # fmt: skip
    return commands


def _hint(value: Any) -> str:
    """An ``argument-hint`` as Claude Code lists it: ``[thing]`` (YAML's list) is ``thing``."""
    if isinstance(value, list):
        return " ".join(str(item) for item in value)
    text = str(value or "").strip()
    return text[1:-1] if text.startswith("[") and text.endswith("]") else text


def invoked(prompt: str, commands: dict[str, Command]) -> tuple[Command, str] | None:
    """The command ``prompt`` invokes and its arguments (None: it is a prompt); an
    ``UnknownCommand`` names one isoagent does not have or will not run."""
    match = _INVOKED.fullmatch(prompt.strip())
    if match is None:
        return None
    name, arguments = match[1], (match[2] or "").strip()
    command = commands.get(name)
    if command is None:
        raise UnknownCommand(f"Unknown slash command: /{name}")
    if _SHELL_LINE.search(command.body):
        raise UnknownCommand(
            f"/{name} is not supported: its file runs shell lines (!`...`), which isoagent "
            "does not run before the model asks"
        )
    return command, arguments


def listed(commands: dict[str, Command]) -> list[dict[str, str]]:
    """The commands as ``initialize`` answers them (the SDK's ``get_server_info``)."""
    return [
        {"name": c.name, "description": c.description, "argumentHint": c.argument_hint}
        for c in commands.values()
    ]
