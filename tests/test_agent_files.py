"""Loading agent types from Claude Code's agent files (parent/agent_files.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isoagent.child.agent.builtin_agents import BASE_TOOLS, BUILTIN_AGENTS
from isoagent.parent.agent_files import (
    AgentCatalog,
    AgentFileError,
    AgentFileErrorException,
    load_agents,
    parse_agent_file,
)


def agent_md(name: str, *front: str, body: str = "You review code.") -> str:
    """An agent file's text: front matter with `name`, a description, `front` lines, body."""
    return "\n".join(
        ["---", f"name: {name}", f"description: The {name} agent.", *front, "---", body]
    )


def write(directory: Path, filename: str, text: str | bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def ws_agents(workdir: Path) -> Path:
    return workdir / ".claude" / "agents"


def home_agents(home: Path) -> Path:
    return home / ".claude" / "agents"


def load(workdir: Path, home: Path, extra_dirs: tuple[Path, ...] = ()) -> AgentCatalog:
    return load_agents(workdir, extra_dirs=extra_dirs, home=home)


def only_error(catalog: AgentCatalog) -> AgentFileError:
    assert len(catalog.errors) == 1, catalog.errors
    return catalog.errors[0]


def test_builtins_present_without_any_files(workdir: Path, home: Path) -> None:
    catalog = load(workdir, home)
    assert list(catalog.agents) == list(BUILTIN_AGENTS)
    assert catalog.warnings == [] and catalog.errors == []


def test_workspace_agent_with_comma_separated_tools(workdir: Path, home: Path) -> None:
    path = write(
        ws_agents(workdir),
        "reviewer.md",
        agent_md("reviewer", "tools: Read, Grep", "model: sonnet", "maxTurns: 7", "color: red"),
    )
    catalog = load(workdir, home)
    spec = catalog.agents["reviewer"]
    assert spec.tools == ["read_file", "grep"]
    assert spec.source == str(path)
    assert spec.system_prompt == "You review code."
    assert spec.description == "The reviewer agent."
    assert (spec.model, spec.max_turns) == ("sonnet", 7)
    assert list(catalog.agents)[: len(BUILTIN_AGENTS)] == list(BUILTIN_AGENTS)
    assert catalog.warnings == [] and catalog.errors == []


def test_list_tools_mapped_deduplicated_in_order(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "a.md",
        agent_md("a", "tools:", "  - Bash", "  - Edit", "  - MultiEdit", "  - LS", "  - glob"),
    )
    spec, warnings = parse_agent_file(path)
    assert spec.tools == ["bash", "edit_file", "glob"]
    assert warnings == []


def test_absent_tools_means_all_base_tools_and_inherit_model(tmp_path: Path) -> None:
    spec, _ = parse_agent_file(write(tmp_path, "a.md", agent_md("a", "model: inherit")))
    assert spec.tools == list(BASE_TOOLS)
    assert spec.model is None and spec.max_turns is None


def test_unknown_tool_is_dropped_with_warning(workdir: Path, home: Path) -> None:
    write(ws_agents(workdir), "web.md", agent_md("web", "tools: Read, WebFetch, mcp__x__y"))
    catalog = load(workdir, home)
    assert catalog.agents["web"].tools == ["read_file"]
    assert len(catalog.warnings) == 2
    assert all("web.md" in w for w in catalog.warnings)
    assert "WebFetch" in catalog.warnings[0] and "mcp__x__y" in catalog.warnings[1]


@pytest.mark.parametrize("task", ["Task", "task"])
def test_task_tool_dropped_with_warning(tmp_path: Path, task: str) -> None:
    spec, warnings = parse_agent_file(
        write(tmp_path, "a.md", agent_md("a", f"tools: {task}, Read"))
    )
    assert spec.tools == ["read_file"]
    assert len(warnings) == 1
    assert "a.md" in warnings[0] and task in warnings[0] and "never" in warnings[0]


def test_malformed_yaml_reports_file_line_and_others_still_load(workdir: Path, home: Path) -> None:
    agents = ws_agents(workdir)
    bad = write(agents, "bad.md", "---\nname: bad\ndescription: x\ntools: [Read,\n---\nbody\n")
    write(agents, "good.md", agent_md("good"))
    catalog = load(workdir, home)
    assert "good" in catalog.agents and "bad" not in catalog.agents
    error = only_error(catalog)
    assert error.path == str(bad)
    assert error.line == 4  # the "tools: [Read," line, counting the opening '---' as line 1
    assert "YAML" in error.message
    assert str(error) == error.describe() == f"{bad}:4: {error.message}"


def test_yaml_error_line_is_offset_by_opening_delimiter(tmp_path: Path) -> None:
    path = write(tmp_path, "a.md", "---\nname: a\ndescription: d\n  bad: indent\n---\nbody\n")
    with pytest.raises(AgentFileErrorException) as info:
        parse_agent_file(path)
    assert info.value.error.line == 4
    assert str(info.value) == info.value.error.describe()


def test_wrong_max_turns_type_names_key_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "a.md", agent_md("a", "model: opus", "maxTurns: ten"))
    with pytest.raises(AgentFileErrorException) as info:
        parse_agent_file(path)
    error = info.value.error
    assert (error.path, error.line) == (str(path), 5)
    assert "maxTurns" in error.message and "Expected `int" in error.message


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("just a prompt\n", 1, "no front matter"),
        ("", 1, "no front matter"),
        ("---\nname: a\ndescription: d\nbody\n", 1, "unterminated"),
        ("---\ndescription: d\n---\nbody", 1, "`name`"),
        ("---\nname: a\ndescription: d\ntools: 5\n---\nbody", 4, "$.tools"),
        ("---\nname: a\ndescription: d\nmaxTurns: 0\n---\nbody", 4, "maxTurns"),
        ("---\n- a list\n---\nbody", 1, "mapping"),
        ("---\nname: a\ndescription: d\n---\n  \n", 4, "empty system prompt"),
        ("---\nname: has space\ndescription: d\n---\nbody", 2, "invalid name"),
        (f"---\nname: {'x' * 65}\ndescription: d\n---\nbody", 2, "invalid name"),
        ("---\nname: a\ndescription: ''\n---\nbody", 3, "empty description"),
    ],
)
def test_malformed_files(tmp_path: Path, text: str, line: int, needle: str) -> None:
    path = write(tmp_path, "a.md", text)
    with pytest.raises(AgentFileErrorException) as info:
        parse_agent_file(path)
    assert info.value.error.line == line
    assert needle in info.value.error.message


def test_precedence_workspace_over_extra_over_home_over_builtin(
    workdir: Path, home: Path, tmp_path: Path
) -> None:
    extra = tmp_path / "extra"
    write(home_agents(home), "explore.md", agent_md("Explore", body="home explore"))
    write(home_agents(home), "shared.md", agent_md("shared", body="home shared"))
    write(home_agents(home), "homeonly.md", agent_md("homeonly", body="home only"))
    write(extra, "shared.md", agent_md("shared", body="extra shared"))
    extra_only = write(extra, "extra.md", agent_md("extraonly", body="extra only"))
    ws_shared = write(ws_agents(workdir), "shared.md", agent_md("shared", body="ws shared"))
    catalog = load(workdir, home, (extra,))
    agents = catalog.agents
    assert agents["Explore"].system_prompt == "home explore"
    assert agents["Explore"].source == str(home_agents(home) / "explore.md")
    assert agents["shared"].system_prompt == "ws shared"
    assert agents["shared"].source == str(ws_shared)
    assert agents["homeonly"].system_prompt == "home only"
    assert agents["extraonly"].source == str(extra_only)
    assert agents["Plan"] == BUILTIN_AGENTS["Plan"]
    assert catalog.errors == []


def test_home_overrides_builtin_and_extra_dir_overrides_home(tmp_path: Path, home: Path) -> None:
    extra = tmp_path / "extra"
    write(home_agents(home), "p.md", agent_md("Plan", body="home plan"))
    assert load(tmp_path / "ws", home).agents["Plan"].system_prompt == "home plan"
    write(extra, "p.md", agent_md("Plan", body="extra plan"))
    assert load(tmp_path / "ws", home, (extra,)).agents["Plan"].system_prompt == "extra plan"


def test_non_utf8_file_is_an_error(workdir: Path, home: Path) -> None:
    path = write(ws_agents(workdir), "latin.md", agent_md("latin").encode() + b"\ncaf\xe9\n")
    write(ws_agents(workdir), "ok.md", agent_md("ok"))
    catalog = load(workdir, home)
    error = only_error(catalog)
    assert (error.path, error.line) == (str(path), 6)
    assert "UTF-8" in error.message
    assert "ok" in catalog.agents


def test_extra_dir_loaded_non_md_ignored_missing_dir_fine(
    workdir: Path, home: Path, tmp_path: Path
) -> None:
    extra = tmp_path / "extra"
    write(extra, "helper.md", agent_md("helper"))
    write(extra, "notes.txt", "not an agent")
    write(extra, "broken.md.bak", "---\n")
    catalog = load(workdir, home, (extra, tmp_path / "missing"))
    assert "helper" in catalog.agents
    assert catalog.errors == [] and catalog.warnings == []


def test_duplicate_name_in_one_dir_warns(workdir: Path, home: Path) -> None:
    write(ws_agents(workdir), "a.md", agent_md("dup", body="first"))
    write(ws_agents(workdir), "b.md", agent_md("dup", body="second"))
    catalog = load(workdir, home)
    assert catalog.agents["dup"].system_prompt == "second"
    assert len(catalog.warnings) == 1 and "dup" in catalog.warnings[0]


_front_matter = st.builds(
    lambda front, body: f"---\n{front}\n---\n{body}", st.text(max_size=80), st.text(max_size=40)
)
_near_valid = st.builds(
    lambda name, tools, turns, body: agent_md(
        name, f"tools: {tools}", f"maxTurns: {turns}", body=body
    ),
    st.text(max_size=20),
    st.text(max_size=30),
    st.text(max_size=10),
    st.text(max_size=20),
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content=st.text(max_size=200) | _front_matter | _near_valid | st.binary(max_size=200))
def test_fuzz_any_content_gives_agent_or_error(tmp_path: Path, content: str | bytes) -> None:
    home = tmp_path / "home"
    directory = ws_agents(tmp_path)
    path = write(directory, "fuzz.md", content)
    try:
        spec, _ = parse_agent_file(path)
    except AgentFileErrorException as exc:
        assert exc.error.path == str(path)
        assert 1 <= exc.error.line <= path.read_bytes().count(b"\n") + 1
        catalog = load(tmp_path, home)
        assert catalog.errors == [exc.error]
    else:
        assert spec.source == str(path) and spec.system_prompt
        catalog = load(tmp_path, home)
        assert catalog.errors == [] and catalog.agents[spec.name] == spec
