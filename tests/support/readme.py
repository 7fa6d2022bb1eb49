"""The README's Python examples, each marked ``<!-- readme-example: NAME -->``, so a test
runs the README's own text and the two cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).parents[2] / "README.md"


def readme_example(name: str) -> str:
    text = README.read_text()
    match = re.search(rf"<!-- readme-example: {name} -->\n```python\n(.*?)```", text, re.S)
    assert match, f"README has no example {name!r}"
    return match.group(1)
