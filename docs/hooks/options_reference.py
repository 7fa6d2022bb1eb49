"""The Options reference (``options.md``) made from the code when the docs build: each field
of ``isoagent.Options`` with its type, its default and what its docstring's Attributes say of
it. A field the docstring does not describe fails the build."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from isoagent import Options

MARKER = "<!-- options table -->"


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs' hook: the marker of a page becomes the table."""
    return markdown.replace(MARKER, options_table()) if MARKER in markdown else markdown


def options_table() -> str:
    described = attributes(Options.__doc__ or "")
    rows = ["| field | type | default | what it is |", "|---|---|---|---|"]
    for field in dataclasses.fields(Options):
        if field.name not in described:
            raise ValueError(f"Options.{field.name} has no line in Options' Attributes")
        rows.append(
            f"| `{field.name}` | `{field.type}` | `{field.default!r}` | {described[field.name]} |"
        )
    return "\n".join(rows)


def attributes(docstring: str) -> dict[str, str]:
    """A Google-style docstring's Attributes section: each name and its text, on one line."""
    section = docstring.split("Attributes:\n", 1)[-1]
    found: dict[str, str] = {}
    name = ""
    for line in section.splitlines():
        if match := re.match(r"^ {8}(\w+): (.*)$", line):
            name = match[1]
            found[name] = match[2]
        elif line.startswith(" " * 12) and name:
            found[name] += " " + line.strip()
    return found
