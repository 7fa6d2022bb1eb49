"""The Python API page's examples, each marked ``<!-- readme-example: NAME -->``, so a test
runs the page's own text and the two cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).parents[2] / "docs" / "pages" / "python-api.md"


def readme_example(name: str) -> str:
    text = PAGE.read_text()
    match = re.search(rf"<!-- readme-example: {name} -->\n```python\n(.*?)```", text, re.S)
    assert match, f"{PAGE.name} has no example {name!r}"
    return match.group(1)
