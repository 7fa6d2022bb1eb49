"""``isoagent agents`` and user agent files in real runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import base_env, cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply

REVIEWER = """\
---
name: reviewer
description: Reviews code without changing it.
tools: Read, Grep, NotebookEdit
maxTurns: 5
---
You are REVIEWER-7, a careful code reviewer.
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    (path / ".claude" / "agents").mkdir(parents=True)
    return path


def plain_env(home: Path) -> dict[str, str]:
    return base_env(HOME=str(home))


def test_agents_lists_builtins_and_files_with_tools_and_source(
    tmp_path: Path, home: Path, workspace: Path
) -> None:
    (workspace / ".claude" / "agents" / "reviewer.md").write_text(REVIEWER)
    extra = tmp_path / "more"
    extra.mkdir()
    (extra / "writer.md").write_text(
        "---\nname: writer\ndescription: Writes docs.\ntools: [Write, Edit]\n"
        "model: claude-haiku-4-5\n---\nYou write docs.\n"
    )
    (home / ".claude" / "agents").mkdir(parents=True)
    (home / ".claude" / "agents" / "Explore.md").write_text(
        "---\nname: Explore\ndescription: My own explorer.\ntools: Glob\n---\nExplore.\n"
    )
    done = run_cli(["agents", "--agents-dir", str(extra)], plain_env(home), cwd=workspace)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "general-purpose  (built-in)\n" in out
    assert "  tools: Bash, Read, Write, Edit, Glob, Grep\n" in out
    assert "Explore  (~/.claude/agents/Explore.md)\n  My own explorer.\n  tools: Glob\n" in out
    assert "reviewer  (.claude/agents/reviewer.md)\n" in out
    assert "  tools: Read, Grep\n  max turns: 5\n" in out
    assert f"writer  ({extra / 'writer.md'})\n" in out
    assert "  tools: Write, Edit\n  model: claude-haiku-4-5\n" in out
    assert done.stderr.splitlines() == [
        "isoagent: warning: agent files: tools isoagent does not have were left out: "
        "NotebookEdit (1 agent)"
    ]


def test_malformed_file_is_named_with_its_line_and_the_others_still_load(
    home: Path, workspace: Path
) -> None:
    agents_dir = workspace / ".claude" / "agents"
    (agents_dir / "reviewer.md").write_text(REVIEWER)
    (agents_dir / "broken.md").write_text("---\nname: broken\ndescription: a\n  b: c\n---\nx\n")
    done = run_cli(["agents"], plain_env(home), cwd=workspace)
    assert done.returncode == 1
    assert "reviewer  (.claude/agents/reviewer.md)" in done.stdout
    assert "Plan  (built-in)" in done.stdout
    assert "broken" not in done.stdout
    lines = [line for line in done.stderr.splitlines() if "broken.md" in line]
    assert len(lines) == 1 and lines[0].startswith("isoagent: agent file skipped: ")
    assert f"{agents_dir / 'broken.md'}:4: invalid YAML" in lines[0]
    assert "Traceback" not in done.stderr


def test_agents_json_is_the_catalog(home: Path, workspace: Path) -> None:
    (workspace / ".claude" / "agents" / "reviewer.md").write_text(REVIEWER)
    done = run_cli(["agents", "--json"], plain_env(home), cwd=workspace)
    assert done.returncode == 0, done.stderr
    catalog = json.loads(done.stdout)
    assert list(catalog["agents"]) == ["Explore", "Plan", "general-purpose", "reviewer"]
    reviewer = catalog["agents"]["reviewer"]
    assert reviewer["tools"] == ["Read", "Grep"]
    assert reviewer["source"] == str(workspace / ".claude" / "agents" / "reviewer.md")
    assert len(catalog["warnings"]) == 1 and catalog["errors"] == []


def test_agents_does_not_import_the_sdk(home: Path, workspace: Path) -> None:
    probe = (
        "import sys\n"
        "from isoagent.parent.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('anthropic' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "agents"],
        env=plain_env(home),
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "Explore  (built-in)" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "False"


def test_user_agent_file_child_is_offered_only_its_tools(
    api_server: MessagesServer, home: Path, workspace: Path
) -> None:
    (workspace / ".claude" / "agents" / "reviewer.md").write_text(REVIEWER)
    (workspace / "code.py").write_text("print('hi')\n")

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("Grep", {"pattern": "print"})
        return text_reply("reviewed")

    api_server.handler = handler
    done = run_cli(
        ["task", "--agent", "reviewer", "review code.py", "-C", str(workspace)],
        cli_env(api_server, HOME=str(home)),
        cwd=workspace,
        input="",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "reviewed\n"
    assert [r.tool_names for r in api_server.requests] == [["Read", "Grep"]] * 2

    assert api_server.requests[0].system == "You are REVIEWER-7, a careful code reviewer."
    assert "code.py" in api_server.requests[1].tool_results[0]["content"]


def test_batch_lines_can_name_a_user_agent(
    api_server: MessagesServer, home: Path, workspace: Path
) -> None:
    (workspace / ".claude" / "agents" / "reviewer.md").write_text(REVIEWER)
    api_server.handler = lambda req: text_reply(",".join(req.tool_names))
    (workspace / "tasks.jsonl").write_text(
        '{"id": "r", "prompt": "review", "agent": "reviewer"}\n{"id": "g", "prompt": "do"}\n'
    )
    done = run_cli(["batch", "tasks.jsonl"], cli_env(api_server, HOME=str(home)), cwd=workspace)
    assert done.returncode == 0, done.stderr
    summaries = {r["id"]: r["summary"] for r in map(json.loads, done.stdout.splitlines())}
    assert summaries == {
        "r": "Read,Grep",
        "g": "Bash,Read,Write,Edit,Glob,Grep",
    }


def test_a_collection_warns_one_line_per_rejected_file_and_one_summary(
    home: Path, workspace: Path
) -> None:
    """A Claude Code agent collection laid out as published: subfolders, READMEs, tools
    isoagent lacks in many files. Rejected files get a line each; the rest, one line."""
    agents_dir = workspace / ".claude" / "agents"
    for team in ("backend", "frontend", "ops/deploy"):
        folder = agents_dir / team
        folder.mkdir(parents=True)
        (folder / "README.md").write_text(f"# {team} agents\n")
        for n in range(4):
            (folder / f"a{n}.md").write_text(
                f"---\nname: {team}-{n}\ndescription: Use when: {team} work\n"
                "tools: Read, NotebookEdit, mcp__github__create_issue, Bash(git:*)\n"
                "color: blue\n---\nYou help.\n"
            )
    (agents_dir / "backend" / "broken.md").write_text("---\nname: b\n")
    (agents_dir / "ops" / "nodesc.md").write_text("---\nname: nodesc\n---\nx\n")
    done = run_cli(["agents", "--json"], plain_env(home), cwd=workspace)
    catalog = json.loads(done.stdout)
    assert {f"{t}-{n}" for t in ("backend", "frontend", "ops/deploy") for n in range(4)} <= set(
        catalog["agents"]
    )
    assert catalog["agents"]["ops/deploy-0"]["bash_allow"] == ["git:*"]
    lines = done.stderr.splitlines()
    assert len(lines) == 3, lines
    skipped = sorted(line for line in lines if "agent file skipped" in line)
    assert "broken.md:1: unterminated front matter" in skipped[0]
    assert "nodesc.md:1: `description`" in skipped[1]
    [summary] = [line for line in lines if "agent file skipped" not in line]
    assert summary == (
        "isoagent: warning: agent files: tools isoagent does not have were left out: "
        "NotebookEdit (12 agents); "
        "3 Markdown file(s) without front matter ignored"
    )


# nine lists of nine aliases to the one before: 9**9 strings once expanded, in 384 bytes
ALIAS_BOMB = """\
---
name: bomb
description: lol
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
tools: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
---
x
"""


@pytest.mark.parametrize(
    ("bomb", "line"),
    [(ALIAS_BOMB, 5), ("---\nname: m\ndescription: d\nx: &x {tools: Read}\n<<: *x\n---\n", 5)],
)
def test_yaml_aliases_in_an_agent_file_are_refused_not_expanded(
    home: Path, workspace: Path, bomb: str, line: int
) -> None:
    agents_dir = workspace / ".claude" / "agents"
    (agents_dir / "reviewer.md").write_text(REVIEWER)
    (agents_dir / "bomb.md").write_text(bomb)
    done = run_cli(["agents"], plain_env(home), cwd=workspace, process=True)  # no hang

    assert done.returncode == 1
    assert "reviewer  (.claude/agents/reviewer.md)" in done.stdout
    assert (
        f"isoagent: agent file skipped: {agents_dir / 'bomb.md'}:{line}: "
        "invalid YAML: aliases (*name) are not allowed in agent files\n"
    ) in done.stderr
    assert "bomb" not in done.stdout


def test_a_huge_agent_file_is_refused_without_being_read_whole(home: Path, workspace: Path) -> None:
    """A repository's agent file of 64 MiB (sparse: no disk used): refused after its
    first MiB, the others still load."""
    agents_dir = workspace / ".claude" / "agents"
    (agents_dir / "reviewer.md").write_text(REVIEWER)
    with (agents_dir / "huge.md").open("wb") as huge:
        huge.write(b"---\nname: huge\ndescription: d\n---\n")
        huge.truncate(64 << 20)
    done = run_cli(["agents"], plain_env(home), cwd=workspace, process=True)

    assert done.returncode == 1
    assert "reviewer  (.claude/agents/reviewer.md)" in done.stdout
    assert (
        f"agent file skipped: {agents_dir / 'huge.md'}:1: larger than 1024 KiB: not an agent file"
    ) in done.stderr
