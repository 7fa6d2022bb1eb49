"""Claude Code's output styles: ``outputStyle`` in its settings files (the user's, the
project's, the local one, or ``--settings``) names how the main agent talks.

``default`` changes nothing; ``Explanatory`` and ``Learning`` are Claude Code's built-in
styles (isoagent says them in its own words); any other is a style file, ``NAME.md`` (or
one whose front matter says ``name: NAME``) in ``.claude/output-styles/`` of the project
or of Claude Code's folder, whose body is the style. The parent's system prompt gets the
style after isoagent's own (a ``--system-prompt`` replaces both). A style isoagent cannot
find is named in one warning line, and the run goes on in the default style; ``init``
reports the name the settings gave, as Claude Code does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from isoagent.parent.claude_code.user_files import (
    config_dir,
    front_matter,
    markdown_files,
    read_setting,
    uses,
)

DEFAULT = "default"
BUILT_IN = {
    "Explanatory": (
        "Output style: Explanatory. Besides doing the task, teach as you go: before and after "
        "you write code, add a short note headed 'Insight' on why the code is as it is and "
        "what in this codebase it relies on. Keep the notes brief and specific to the code."
    ),
    "Learning": (
        "Output style: Learning. Work with the user as a teacher would: explain what you do and "
        "why, and for a small, meaningful piece of the work (a few lines of logic, a design "
        "choice) leave a TODO(human) comment saying what it must do, and ask the user to write "
        "it, instead of writing it yourself."
    ),
}


@dataclass(frozen=True)
class OutputStyle:
    name: str = DEFAULT  # as the settings name it (init's output_style)
    prompt: str = ""  # what the parent's system prompt gets ("": nothing)


def output_style(
    workdir: Path,
    sources: Sequence[str] | None,
    given: str = "",
    warn: Callable[[str], None] | None = None,
) -> OutputStyle:
    """The style the settings files name (``given``: ``--settings``' ``outputStyle``, above
    them); a style that cannot be found or read is said to ``warn``, and adds nothing."""
    name, where = given, "--settings"
    if not name:
        value, path = read_setting(workdir, sources, "outputStyle")
        name, where = (value, str(path)) if isinstance(value, str) and value else (DEFAULT, "")
    if name == DEFAULT:
        return OutputStyle()
    if name in BUILT_IN:
        return OutputStyle(name, BUILT_IN[name])
    folders = [
        *([workdir / ".claude" / "output-styles"] if uses(sources, "project") else []),
        *([config_dir() / "output-styles"] if uses(sources, "user") else []),
    ]
    try:
        prompt = _style_file(name, folders)
    except (OSError, ValueError) as exc:
        prompt, why = None, str(exc)
    else:
        why = f"no {name}.md in {' or '.join(str(f) for f in folders) or 'any folder read'}"
    if prompt is None and warn is not None:
        warn(
            f"warning: output style {name!r} ({where}) is not used: {why}; built in: "
            f"{', '.join([DEFAULT, *BUILT_IN])}"
        )
    return OutputStyle(name, prompt or "")


def _style_file(name: str, folders: list[Path]) -> str | None:
    """The body of style ``name``'s file in the first of ``folders`` that has it."""
    for folder in folders:
        for path in markdown_files(folder):
            data, body = front_matter(path)
            if str(data.get("name") or path.stem) == name:
                return body.strip()
    return None
