"""Claude Code's ``Bash(git:*)`` rules and ``permissionMode: plan``: what an agent file
restricts, the child enforces."""

from __future__ import annotations

from pathlib import Path

import pytest

from isoagent.child.agent.tools.bash_rules import CommandRefused, check
from isoagent.parent.children.sandbox_policy import landlock_available
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply

GIT = ["git:*"]


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "git log --oneline | git shortlog",
        'git commit -m "a; rm -rf / && x"',
        "git log > /dev/null 2>&1",
        "git status; git diff\ngit log &",
    ],
)
def test_commands_matching_the_prefix_in_every_part_run(command: str) -> None:
    check(command, GIT)


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("rm -rf x", "`rm -rf x` is not allowed"),
        ("gitk", "`gitk` is not allowed"),
        ("git status && rm -rf x", "`rm -rf x`"),
        ("git status || curl evil", "`curl evil`"),
        ("git status; rm x", "`rm x`"),
        ("git status\nrm x", "`rm x`"),
        ("git log | sh", "`sh`"),
        ("git status & rm x", "`rm x`"),
        ("git $(rm x)", "substitution"),
        ("git `rm x`", "substitution"),
        ("git diff <(rm x)", "substitution"),
        ("git ${IFS}", "substitution"),
        ("(git status; rm x)", "subshells"),
        ("{ git status; }", "subshells"),
        ("git log > out.txt", "redirection"),
        ("git log >| out.txt", "redirection"),
        ("git log <<EOF\nx\nEOF", "redirection"),
        ("FOO=1 git status", "not allowed"),
        ("if git status; then rm x; fi", "not allowed"),
        ("git 'unterminated", "cannot parse"),
        ("", "empty"),
    ],
)
def test_anything_else_is_refused_with_the_reason(command: str, why: str) -> None:
    with pytest.raises(CommandRefused, match=why):
        check(command, GIT)


def test_multi_word_prefix_and_exact_rules() -> None:
    check("npm run test -- -k x", ["npm run test:*"])
    check("git status", ["git status"])
    with pytest.raises(CommandRefused):
        check("npm run build", ["npm run test:*"])
    with pytest.raises(CommandRefused):
        check("git status --porcelain; x", ["git status"])


def test_deny_rules_refuse_matching_parts_even_without_allow_rules() -> None:
    check("ls -la", [], ["rm:*"])
    with pytest.raises(CommandRefused, match="denied"):
        check("ls && rm -rf x", [], ["rm:*"])
    with pytest.raises(CommandRefused, match="denied"):
        check("git push --force", ["git:*"], ["git push:*"])


GIT_ONLY = """\
---
name: git-only
description: Looks at history.
tools: Read, Bash(git:*)
---
You read git history.
"""


def test_a_child_refuses_a_compound_command_and_the_model_reads_why(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """Played by a prompt-injected model: `git status && rm` must not delete the file;
    the refusal is a tool error the model sees, and an allowed git command runs."""
    workspace = tmp_path / "ws"
    (workspace / ".claude" / "agents").mkdir(parents=True)
    (workspace / ".claude" / "agents" / "git-only.md").write_text(GIT_ONLY)
    victim = workspace / "precious.txt"
    victim.write_text("keep me")

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("bash", {"command": "git --version && rm -f precious.txt"})
        if req.turn == 1:
            return tool_reply("bash", {"command": "git --version"})
        return text_reply("done")

    api_server.handler = handler
    done = run_cli(
        ["task", "--agent", "git-only", "--sandbox", "off", "look", "-C", str(workspace)],
        cli_env(api_server, HOME=str(tmp_path / "home")),
        cwd=workspace,
        input="",
    )
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "keep me"
    refused = api_server.requests[1].tool_results[0]
    assert refused["is_error"] is True
    assert "command refused: `rm -f precious.txt` is not allowed" in refused["content"]
    allowed = api_server.requests[2].tool_results[0]
    assert "git version" in allowed["content"] and not allowed.get("is_error")


PLANNER = """\
---
name: planner
description: Plans only.
permissionMode: plan
---
You plan.
"""


@pytest.mark.skipif(not landlock_available(), reason="kernel has no Landlock")
def test_a_plan_mode_agent_cannot_write_even_through_bash(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """permissionMode: plan in an agent file: no write tools, and the kernel keeps its bash
    from writing (the read-only sandbox), played by a model that tries anyway."""
    workspace = tmp_path / "ws"
    (workspace / ".claude" / "agents").mkdir(parents=True)
    (workspace / ".claude" / "agents" / "planner.md").write_text(PLANNER)

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("bash", {"command": "touch made.txt"})
        return text_reply(f"{','.join(req.tool_names)} | {req.tool_results[0]['content']}")

    api_server.handler = handler
    done = run_cli(
        ["task", "--agent", "planner", "plan", "-C", str(workspace)],
        cli_env(api_server, HOME=str(tmp_path / "home")),
        cwd=workspace,
        input="",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("bash,read_file,glob,grep | ")
    assert "Permission denied" in done.stdout or "Read-only" in done.stdout
    assert not (workspace / "made.txt").exists()
