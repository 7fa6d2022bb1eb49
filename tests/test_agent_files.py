"""Loading agent types from Claude Code's agent files (parent/claude_code/agent_files.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isoagent.child.agent.builtin_agents import BASE_TOOLS, BUILTIN_AGENTS, writes
from isoagent.parent.claude_code.agent_files import (
    AgentCatalog,
    AgentFileError,
    AgentFileErrorException,
    NotAnAgentFile,
    inline_agents,
    load_agents,
    parse_agent_file,
)
from isoagent.parent.model.aliases import CURRENT_MODELS


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
        agent_md("reviewer", "tools: Read, Grep", "model: claude-x-1", "maxTurns: 7", "color: red"),
    )
    catalog = load(workdir, home)
    spec = catalog.agents["reviewer"]
    assert spec.tools == ["Read", "Grep"]
    assert spec.source == str(path)
    assert spec.system_prompt == "You review code."
    assert spec.description == "The reviewer agent."
    assert (spec.model, spec.max_turns) == ("claude-x-1", 7)
    assert list(catalog.agents)[: len(BUILTIN_AGENTS)] == list(BUILTIN_AGENTS)
    assert catalog.warnings == [] and catalog.errors == []


def test_list_tools_in_order_once_and_the_old_multi_edit_and_ls_left_out(tmp_path: Path) -> None:
    """As Claude Code (2.1) reads them: MultiEdit and LS are no tools of it any more, so an
    agent naming them gets neither Edit nor Glob for them; the summary line names them."""
    path = write(
        tmp_path,
        "a.md",
        agent_md("a", "tools:", "  - Bash", "  - Edit", "  - MultiEdit", "  - LS", "  - Glob",
                 "  - Edit"),
    )  # fmt: skip
    spec, missing = parse_agent_file(path)
    assert spec.tools == ["Bash", "Edit", "Glob"]
    assert missing == ["MultiEdit", "LS"]


@pytest.mark.parametrize(
    ("front", "old", "new"),
    [
        ("tools: read_file, Grep", "read_file", "Read"),
        ("tools: [Read, bash]", "bash", "Bash"),
        ("disallowedTools: write_file", "write_file", "Write"),
        ("tools: Read, task", "task", "Agent"),
    ],
)
def test_a_tool_by_isoagents_old_name_is_refused_with_the_name_to_use(
    tmp_path: Path, front: str, old: str, new: str
) -> None:
    """An agent file written for isoagent before it took Claude Code's names must not lose
    (or keep) a tool silently: one line names the tool and what it is called now."""
    with pytest.raises(AgentFileErrorException) as caught:
        parse_agent_file(write(tmp_path, "a.md", agent_md("a", front)))
    assert caught.value.error.line == 4
    assert f"names {old!r}: did you mean {new}?" in caught.value.error.message
    with pytest.raises(ValueError, match=f"names {old!r}: did you mean {new}"):
        inline_agents(json.dumps({"a": {"description": "d", "prompt": "p", "tools": [old]}}))


def test_absent_tools_means_all_base_tools_and_inherit_model(tmp_path: Path) -> None:
    spec, _ = parse_agent_file(write(tmp_path, "a.md", agent_md("a", "model: inherit")))
    assert spec.tools == list(BASE_TOOLS)
    assert spec.model is None and spec.max_turns is None


def test_tools_isoagent_lacks_are_named_once_in_one_summary_line(workdir: Path, home: Path) -> None:
    for n in range(3):
        write(ws_agents(workdir), f"web{n}.md", agent_md(f"web{n}", "tools: Read, NotebookEdit"))
    catalog = load(workdir, home)
    assert catalog.agents["web0"].tools == ["Read"]
    assert len(catalog.warnings) == 1
    assert "NotebookEdit (3 agents)" in catalog.warnings[0]


def test_mcp_tools_an_agent_names_are_kept_for_its_servers_less_those_it_disallows(
    tmp_path: Path,
) -> None:
    front = ("tools: Read, mcp__x__y, mcp__z, mcp__w__v", "disallowedTools: mcp__w__v")
    spec, missing = parse_agent_file(write(tmp_path, "a.md", agent_md("a", *front)))
    assert spec.tools == ["Read"] and missing == []
    assert spec.mcp_tools == ["mcp__x__y", "mcp__z"]


def test_a_servers_wildcard_grants_and_takes_away_every_tool_of_it(tmp_path: Path) -> None:
    front = ("tools: Read, mcp__calc__*, mcp__z__*", "disallowedTools: mcp__z__*")
    spec, missing = parse_agent_file(write(tmp_path, "a.md", agent_md("a", *front)))
    assert (spec.tools, spec.mcp_tools, missing) == (["Read"], ["mcp__calc"], [])


@pytest.mark.parametrize(
    ("field", "why"),
    [
        ("memory: user", "memory is not supported: isoagent's agents keep no memory"),
        ("skills: [pdf]", "skills is not supported: isoagent has no skills"),
        ("hooks: {Stop: []}", "hooks is not supported: isoagent runs an agent's own hooks"),
        ("isolation: worktree", "isolation is not supported: each isoagent child is isolated"),
        ("effort: huge", "effort must be one of low, medium, high, max, not 'huge'"),
    ],
)
def test_a_field_isoagent_cannot_honour_refuses_the_agent_by_name(
    field: str, why: str, tmp_path: Path
) -> None:
    with pytest.raises(AgentFileErrorException, match=re.escape(why)):
        parse_agent_file(write(tmp_path, "a.md", agent_md("a", field)))


def test_fields_claude_code_uses_only_for_a_main_agent_are_accepted(tmp_path: Path) -> None:
    front = ("initialPrompt: Start.", "color: blue", "effort: high")
    spec, _ = parse_agent_file(write(tmp_path, "a.md", agent_md("a", *front)))
    assert spec.effort == "high"


def test_disallowing_one_tool_of_a_server_given_whole_refuses_the_agent(tmp_path: Path) -> None:
    front = ("tools: mcp__z", "disallowedTools: mcp__z__drop")
    with pytest.raises(AgentFileErrorException, match="mcp__z__drop"):
        parse_agent_file(write(tmp_path, "a.md", agent_md("a", *front)))


def test_mcp_servers_lists_servers_by_name_and_defines_the_agents_own_inline(
    tmp_path: Path,
) -> None:
    front = (
        "mcpServers:",
        "  - github",
        "  - ctx:",
        "      command: ctx-server",
        "      args: [-v]",
    )
    spec, _ = parse_agent_file(write(tmp_path, "a.md", agent_md("a", *front)))
    assert spec.mcp_tools == ["mcp__github", "mcp__ctx"]  # no tools: every tool of each
    assert [(s.name, s.command, s.args) for s in spec.mcp_servers] == [
        ("ctx", "ctx-server", ["-v"])
    ]
    listed = parse_agent_file(write(tmp_path, "b.md", agent_md("b", "tools: mcp__ctx__t", *front)))
    assert listed[0].mcp_tools == ["mcp__ctx__t"]  # tools is the allow-list, as in Claude Code


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("mcpServers: github", "must be a list"),
        ("mcpServers: [3]", "each entry is a server's name"),
        ("mcpServers: [{a: {command: x}, b: {command: y}}]", "each entry is a server's name"),
        ("mcpServers: [{ctx: x}]", "'ctx' must map to a server's settings"),
        ("mcpServers: [{ctx: {args: [a]}}]", "MCP server 'ctx' has no command"),
        ("mcpServers: [{ctx: {type: ws, url: 'ws://h'}}]", "of type ws; isoagent's"),
        ("mcpServers: [{ctx: {type: http}}]", "MCP server 'ctx' has no http(s) url"),
        ("mcpServers: ['a b']", "'a b' is not a server name"),
    ],
)
def test_a_malformed_mcp_servers_rejects_the_file_at_its_line(
    tmp_path: Path, value: str, needle: str
) -> None:
    with pytest.raises(AgentFileErrorException) as caught:
        parse_agent_file(write(tmp_path, "a.md", agent_md("a", "model: sonnet", value)))
    assert caught.value.error.line == 5 and needle in caught.value.error.message


@pytest.mark.parametrize("task", ["Task", "Agent"])
def test_task_tool_is_never_given_to_a_child(tmp_path: Path, task: str) -> None:
    spec, missing = parse_agent_file(write(tmp_path, "a.md", agent_md("a", f"tools: {task}, Read")))
    assert spec.tools == ["Read"]
    assert missing == []


def test_malformed_yaml_reports_file_line_and_others_still_load(workdir: Path, home: Path) -> None:
    agents = ws_agents(workdir)
    bad = write(agents, "bad.md", "---\nname: bad\ndescription: x\n  tools: [Read\n---\nbody\n")
    write(agents, "good.md", agent_md("good"))
    catalog = load(workdir, home)
    assert "good" in catalog.agents and "bad" not in catalog.agents
    error = only_error(catalog)
    assert error.path == str(bad)
    assert error.line == 4  # the "  tools: [Read" line, counting the opening '---' as line 1
    assert "YAML" in error.message
    assert str(error) == error.describe() == f"{bad}:4: {error.message}"


def test_yaml_error_line_is_offset_by_opening_delimiter(tmp_path: Path) -> None:
    path = write(tmp_path, "a.md", "---\nname: a\ndescription: d\n  bad: indent\n---\nbody\n")
    with pytest.raises(AgentFileErrorException) as info:
        parse_agent_file(path)
    assert info.value.error.line == 4
    assert str(info.value) == info.value.error.describe()


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("---\nname: a\ndescription: d\nbody\n", 1, "unterminated"),
        ("---\ndescription: d\n---\nbody", 1, "`name`"),
        ("---\nname: 123\ndescription: d\n---\nbody", 2, "`name`"),
        ("---\nname: ''\ndescription: d\n---\nbody", 2, "`name`"),
        ("---\nname: a\n---\nbody", 1, "`description`"),
        ("---\nname: a\ndescription: 42\n---\nbody", 3, "`description`"),
        ("---\nname: a\ndescription: [a, b]\n---\nbody", 3, "`description`"),
        ("---\n- a list\n---\nbody", 1, "mapping"),
        ("---\nname: a\ndescription: ''\n---\nbody", 3, "`description`"),
        ("---\nname: a\ndescription: d\n  more: text\n---\nbody", 4, "invalid YAML"),
    ],
)
def test_files_claude_code_rejects_are_rejected(
    tmp_path: Path, text: str, line: int, needle: str
) -> None:
    path = write(tmp_path, "a.md", text)
    with pytest.raises(AgentFileErrorException) as info:
        parse_agent_file(path)
    assert info.value.error.line == line
    assert needle in info.value.error.message


@pytest.mark.parametrize("text", ["just a prompt\n", "", "\n---\nname: a\ndescription: d\n---\nb"])
def test_markdown_without_front_matter_is_not_an_agent_and_counted_once(
    workdir: Path, home: Path, text: str
) -> None:
    write(ws_agents(workdir), "README.md", text)
    write(ws_agents(workdir) / "sub", "NOTES.md", text)
    catalog = load(workdir, home)
    assert catalog.errors == []
    assert len(catalog.warnings) == 1
    assert "2 Markdown file(s) without front matter ignored" in catalog.warnings[0]


# Files Claude Code 2.1 loads, as it loads them (checked against its CLI): front matter
# that is not valid YAML as a whole, odd names, values of the wrong type, an empty body.
LENIENT_CORPUS = {
    "colon.md": (
        "---\nname: colon-desc\ndescription: Use this agent when: the user asks. "
        "Example: foo\ntools: Read, Grep\n---\nBody.\n",
        "colon-desc",
        "Use this agent when: the user asks. Example: foo",
    ),
    "stars.md": (
        "---\nname: stars\ndescription: **Important** agent\n---\nBody.\n",
        "stars",
        "**Important** agent",
    ),
    "dots.md": ("---\nname: my.agent.v2\ndescription: dotted\n---\nB\n", "my.agent.v2", "dotted"),
    "space.md": ("---\nname: has spaces\ndescription: s\n---\nB\n", "has spaces", "s"),
    "unclosed.md": ("---\nname: u\ndescription: [unclosed\n---\nB\n", "u", "[unclosed"),
    "hash.md": ("---\nname: h\ndescription: Use #1 agent: x\n---\nB\n", "h", "Use"),
    "quoted.md": (
        '---\nname: q\ndescription: "Quoted" then more: text\n---\nB\n',
        "q",
        '"Quoted" then more: text',
    ),
    "crlf.md": ("---\r\nname: crlf\r\ndescription: w\r\n---\r\nBody.\r\n", "crlf", "w"),
    "bom.md": ("\ufeff---\nname: bom\ndescription: b\n---\nB\n", "bom", "b"),
    "empty-body.md": ("---\nname: nobody\ndescription: e\n---\n", "nobody", "e"),
    "odd-values.md": (
        "---\nname: odd\ndescription: o\ntools: 5\nmaxTurns: abc\nmodel: 5\n---\nB\n",
        "odd",
        "o",
    ),
    "zero-turns.md": ("---\nname: z\ndescription: z\nmaxTurns: 0\n---\nB\n", "z", "z"),
}


@pytest.mark.parametrize("filename", sorted(LENIENT_CORPUS))
def test_files_claude_code_loads_are_loaded(tmp_path: Path, filename: str) -> None:
    text, name, description = LENIENT_CORPUS[filename]
    spec, _ = parse_agent_file(write(tmp_path, filename, text))
    assert (spec.name, spec.description) == (name, description)


def test_values_of_the_wrong_type_are_ignored_as_claude_code_does(tmp_path: Path) -> None:
    text = LENIENT_CORPUS["odd-values.md"][0]
    spec, _ = parse_agent_file(write(tmp_path, "odd.md", text))
    assert spec.tools == list(BASE_TOOLS)
    assert spec.max_turns is None and spec.model is None


def test_subfolders_are_scanned_and_the_whole_corpus_gives_no_warning(
    workdir: Path, home: Path
) -> None:
    for n, (filename, (text, _, _)) in enumerate(sorted(LENIENT_CORPUS.items())):
        folder = ws_agents(workdir) / ("a" * (n % 3)) / ("b" * (n % 2))
        write(folder, filename, text.encode())
    catalog = load(workdir, home)
    assert catalog.errors == [] and catalog.warnings == []
    names = {name for _, name, _ in LENIENT_CORPUS.values()}
    assert names <= set(catalog.agents)


def test_a_symlinked_folder_is_not_followed(workdir: Path, home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside, "x.md", agent_md("outsider"))
    ws_agents(workdir).mkdir(parents=True)
    (ws_agents(workdir) / "link").symlink_to(outside)
    assert "outsider" not in load(workdir, home).agents


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


def test_duplicate_name_in_one_dir_later_path_wins_named_in_the_summary(
    workdir: Path, home: Path
) -> None:
    write(ws_agents(workdir), "a.md", agent_md("dup", body="first"))
    write(ws_agents(workdir) / "sub", "b.md", agent_md("dup", body="second"))
    catalog = load(workdir, home)
    assert catalog.agents["dup"].system_prompt == "second"
    assert (
        len(catalog.warnings) == 1 and "defined again by a later file: dup" in catalog.warnings[0]
    )


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
    except NotAnAgentFile:
        assert not load(tmp_path, home).errors
    except AgentFileErrorException as exc:
        assert exc.error.path == str(path)
        assert 1 <= exc.error.line <= path.read_bytes().count(b"\n") + 1
        catalog = load(tmp_path, home)
        assert catalog.errors == [exc.error]
    else:
        assert spec.source == str(path) and spec.name and spec.description
        catalog = load(tmp_path, home)
        assert catalog.errors == [] and catalog.agents[spec.name] == spec


def test_disallowed_tools_are_taken_away(tmp_path: Path) -> None:
    spec, _ = parse_agent_file(
        write(tmp_path, "a.md", agent_md("a", "disallowedTools: Bash, Write, WebFetch, mcp__x"))
    )
    assert spec.tools == ["Read", "Edit", "Glob", "Grep"]


def test_an_unknown_disallowed_tool_rejects_the_agent(tmp_path: Path) -> None:
    path = write(tmp_path, "a.md", agent_md("a", "tools: Read, Bash", "disallowedTools: Bsh"))
    with pytest.raises(AgentFileErrorException) as info:
        parse_agent_file(path)
    assert info.value.error.line == 5 and "'Bsh'" in info.value.error.message


def test_a_rule_isoagent_cannot_enforce_on_a_disallowed_tool_takes_the_whole_tool(
    tmp_path: Path,
) -> None:
    spec, _ = parse_agent_file(
        write(tmp_path, "a.md", agent_md("a", "disallowedTools: Read(.env)"))
    )
    assert "Read" not in spec.tools


def test_a_path_rule_in_tools_grants_nothing(tmp_path: Path) -> None:
    spec, missing = parse_agent_file(write(tmp_path, "a.md", agent_md("a", "tools: Read(src/**)")))
    assert spec.tools == [] and missing == ["Read(...)"]


def test_permission_mode_plan_makes_the_agent_read_only(tmp_path: Path) -> None:
    spec, _ = parse_agent_file(write(tmp_path, "a.md", agent_md("a", "permissionMode: plan")))
    assert not writes(spec)
    assert spec.tools == ["Bash", "Read", "Glob", "Grep"]


@pytest.mark.parametrize(
    ("tools", "allow", "deny"),
    [
        ("Read, Bash(git:*)", ["git:*"], []),
        ("Read Bash(git log:*) Bash(npm run test:*)", ["git log:*", "npm run test:*"], []),
        ("Bash(git:*), Bash", [], []),
        ("Bash(*)", [], []),
    ],
)
def test_bash_rules_restrict_bash(
    tmp_path: Path, tools: str, allow: list[str], deny: list[str]
) -> None:
    spec, _ = parse_agent_file(write(tmp_path, "a.md", agent_md("a", f"tools: {tools}")))
    assert "Bash" in spec.tools
    assert (spec.bash_allow, spec.bash_deny) == (allow, deny)


def test_a_bash_rule_in_disallowed_tools_is_a_deny_rule(tmp_path: Path) -> None:
    spec, _ = parse_agent_file(
        write(tmp_path, "a.md", agent_md("a", "disallowedTools: Bash(rm:*), Bash(git push:*)"))
    )
    assert "Bash" in spec.tools and spec.bash_deny == ["rm:*", "git push:*"]


@pytest.mark.parametrize(
    ("model", "env", "expected"),
    [
        ("sonnet", {}, CURRENT_MODELS["sonnet"]),
        ("Opus", {}, CURRENT_MODELS["opus"]),
        ("haiku", {}, CURRENT_MODELS["haiku"]),
        ("fable", {}, CURRENT_MODELS["fable"]),
        ("sonnet[1m]", {}, CURRENT_MODELS["sonnet"]),
        ("best", {}, CURRENT_MODELS["opus"]),
        ("sonnet", {"ANTHROPIC_DEFAULT_SONNET_MODEL": "my-sonnet"}, "my-sonnet"),
        ("fable", {"ANTHROPIC_DEFAULT_FABLE_MODEL": "my-fable"}, "my-fable"),
        ("claude-x-9", {"ANTHROPIC_DEFAULT_SONNET_MODEL": "nope"}, "claude-x-9"),
        ("inherit", {}, None),
    ],
)
def test_model_aliases_resolve_as_in_claude_code(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    env: dict[str, str],
    expected: str | None,
) -> None:
    for family in CURRENT_MODELS:
        monkeypatch.delenv(f"ANTHROPIC_DEFAULT_{family.upper()}_MODEL", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    spec, _ = parse_agent_file(write(tmp_path, "a.md", agent_md("a", f"model: {model}")))
    assert spec.model == expected


def test_inline_agents_json_as_claude_code_takes_it() -> None:
    agents = inline_agents(
        '{"rev": {"description": "reviews", "prompt": "You review.", "tools": ["Read", '
        '"Bash(git:*)"], "disallowedTools": ["Write"], "model": "haiku", "maxTurns": 3, '
        '"permissionMode": "plan", "color": "red"}}'
    )
    rev = agents["rev"]
    assert (rev.description, rev.system_prompt, rev.max_turns) == ("reviews", "You review.", 3)
    assert rev.tools == ["Read", "Bash"] and rev.bash_allow == ["git:*"]

    assert rev.model == CURRENT_MODELS["haiku"] and rev.source == "--agents"


def test_an_agent_definitions_mcp_servers_are_its_mcp_servers_field() -> None:
    """``isoagent.AgentDefinition(mcp_servers=...)`` is ``--agents`` JSON's ``mcpServers``."""
    from isoagent import AgentDefinition

    definition = AgentDefinition(
        description="d", prompt="p", mcp_servers=["github", {"ctx": {"command": "c"}}]
    )
    text = json.dumps({"x": definition.as_claude_json()})
    spec = inline_agents(text)["x"]
    assert spec.mcp_tools == ["mcp__github", "mcp__ctx"]
    assert [(s.name, s.command) for s in spec.mcp_servers] == [("ctx", "c")]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{bad", "invalid JSON"),
        ("[]", "JSON object"),
        ('{"x": {"prompt": "p"}}', "x.description: expected a string"),
        ('{"x": {"description": "d"}}', "x.prompt: expected a string"),
        ('{"x": {"description": "d", "prompt": "p", "tools": "Read"}}', "x.tools: expected"),
        ('{"x": {"description": "d", "prompt": "p", "disallowedTools": ["Zap"]}}', "'Zap'"),
        ('{"x": {"description": "d", "prompt": "p", "mcpServers": "c"}}', "x.mcpServers: expected"),
        (
            '{"x": {"description": "d", "prompt": "p", "mcpServers": [{"c": {"type": "sse"}}]}}',
            "x: mcpServers: MCP server 'c' has no http(s) url",
        ),
    ],
)
def test_invalid_inline_agents_are_refused_whole(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        inline_agents(text)
