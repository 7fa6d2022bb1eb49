"""The README is the front door and the user's guide builds: the docs tool's warnings are
errors (a broken link, a page not in the navigation), and every page the README links to is
there."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_guide_builds_with_no_warning(tmp_path: Path) -> None:
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "-q"]
    build += ["-f", str(REPO / "docs" / "mkdocs.yml"), "-d", str(tmp_path / "site")]
    done = subprocess.run(build, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "python-api" / "index.html").is_file()


def test_the_readme_is_a_front_door_whose_links_lead_somewhere() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert "docs/pages/commands.md" in links
    missing = [link for link in links if "://" not in link and not (REPO / link).is_file()]
    assert missing == []
