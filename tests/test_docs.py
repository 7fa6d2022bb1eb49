"""The README is the front door and the user's guide builds: the docs tool's warnings are
errors (a broken link, a page not in the navigation), and every page the README links to is
there."""

from __future__ import annotations

import dataclasses
import pydoc
import re
import subprocess
import sys
from pathlib import Path

from isoagent import Options

REPO = Path(__file__).resolve().parent.parent


def test_the_guide_builds_with_no_warning(tmp_path: Path) -> None:
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "-q"]
    build += ["-f", str(REPO / "docs" / "mkdocs.yml"), "-d", str(tmp_path / "site")]
    done = subprocess.run(build, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    site = tmp_path / "site"
    assert (site / "python-api" / "index.html").is_file()
    assert (site / "install" / "index.html").is_file()
    # a table's pipe in code (`FILE|-`) renders as a pipe, never as a backslash and a pipe
    assert [page for page in site.rglob("*.html") if "\\|" in page.read_text()] == []
    # the Options reference is made from the code: a row per field, with its docstring's words
    reference = (site / "options" / "index.html").read_text()
    for field in dataclasses.fields(Options):
        assert f"<td><code>{field.name}</code></td>" in reference, field.name
    assert "Model turns per agent; 0: no limit" in reference


def test_help_of_options_describes_every_field() -> None:
    """``help(isoagent.Options)`` is the reference too: a line for each field."""
    shown = pydoc.render_doc(Options, renderer=pydoc.plaintext)
    described = [f.name for f in dataclasses.fields(Options) if f"    {f.name}: " in shown]
    assert described == [f.name for f in dataclasses.fields(Options)]


def test_install_from_a_checkout_is_what_the_docs_say() -> None:
    """isoagent is not on PyPI: no page tells a reader to install it from there."""
    pages = [*(REPO / "docs" / "pages").glob("*.md"), REPO / "README.md"]
    said = [page.name for page in pages if "isoagent[" in page.read_text()]
    assert said == []


def test_the_readme_is_a_front_door_whose_links_lead_somewhere() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert "docs/pages/commands.md" in links
    missing = [link for link in links if "://" not in link and not (REPO / link).is_file()]
    assert missing == []
