"""The installed distribution holds every module of the repository, under ``isoagent`` only.

Tests run against an editable install, which finds a subpackage that pyproject.toml forgot;
a user's ``pip install .`` would not. So the listing itself is checked here."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def listed_packages() -> dict[str, Path]:
    """pyproject's packages, each with the folder its package-dir mapping gives it."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = setuptools["package-dir"]
    folders = {}
    for package in setuptools["packages"]:
        root = max((name for name in mapping if f"{package}.".startswith(f"{name}.")), key=len)
        rest = package[len(root) :].lstrip(".").replace(".", "/")
        folders[package] = REPO / mapping[root] / rest
    return folders


def test_every_package_folder_is_in_the_distribution() -> None:
    listed = set(listed_packages().values())
    found = {
        init.parent
        for folder in ("parent", "child", "protocol")
        for init in (REPO / folder).rglob("__init__.py")
        if init.parent != REPO / "parent" / "api"  # the package root, listed as isoagent
    }
    assert sorted(found - listed) == []


def test_the_distribution_installs_one_top_level_package() -> None:
    assert {name.split(".")[0] for name in listed_packages()} == {"isoagent"}


def test_the_package_says_it_is_typed() -> None:
    """``py.typed`` (PEP 561) ships with the package root, so a user's type checker reads
    isoagent's annotations."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in setuptools["package-data"]["isoagent"]
    assert (REPO / setuptools["package-dir"]["isoagent"] / "py.typed").is_file()
