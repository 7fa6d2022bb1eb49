"""Claude Code's ``Bash(git:*)`` rules and ``permissionMode: plan``: what an agent file
restricts, the child enforces."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from isoagent.child.agent.tools.base import ToolContext
from isoagent.child.agent.tools.bash import Bash
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
        ("git fetch \\\n--upload-pack='touch pwned;' ../r", "line continuation"),
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


# Attacks on Bash(git:*): each makes git run a command of the agent's choosing
GIT_ESCAPES = [
    ("git -c alias.x='!touch pwned' x", "global option -c"),
    ("git -c core.fsmonitor='touch pwned' status", "global option -c"),
    ("git -c core.pager='touch pwned' -p log", "global option -c"),
    ("git --config-env=core.sshCommand=HOME fetch", "global option --config-env"),
    ("git -C /tmp/planted status", "global option -C"),
    ("git --git-dir=/tmp/planted/.git status", "global option --git-dir"),
    ("git --work-tree=. --git-dir /tmp/p status", "global option --work-tree"),
    ("git --exec-path=/tmp/planted status", "global option --exec-path"),
    ("git -[c] alias.x='!touch pwned' x", "could expand"),
    ("git fetch * origin", "could expand"),
    ("git fetch $X--upload-pack='touch pwned' /tmp/repo", "could expand to any word"),
    ("git fetch {--upload-pack='touch pwned',/tmp/repo}", "could expand to any word"),
    ("git $'-c' alias.x='!touch pwned' x", "could expand to any word"),
    ("git fetch --upload-pack='touch pwned' /tmp/repo", "--upload-pack"),
    ("git fetch --upload-pa='touch pwned' /tmp/repo", "--upload-pa"),
    ("git ls-remote --exec='touch pwned' /tmp/repo", "--exec"),
    ("git clone -u 'touch pwned' /tmp/repo x", "-u of `git clone`"),
    ("git clone -qc core.hooksPath=/tmp/h /tmp/repo x", "-qc of `git clone`"),
    ("git clone --config core.fsmonitor=x /tmp/repo x", "--config"),
    ("git clone --template=/tmp/hooks /tmp/repo x", "--template"),
    ("git init --templ=/tmp/hooks x", "--templ"),
    ("git push --receive-pack='touch pwned' /tmp/repo", "--receive-pack"),
    ("git archive --remote=/tmp/repo --exec='touch pwned' HEAD", "--exec"),
    ("git clone 'ext::sh -c touch% pwned' x", "remote helper"),
    ("git fetch fd::3", "remote helper"),
    ("git rebase -x 'touch pwned' HEAD~1", "-x of `git rebase`"),
    ("git rebase -ix 'touch pwned' HEAD~1", "-ix of `git rebase`"),
    ("git rebase --exec 'touch pwned' HEAD~1", "--exec"),
    ("git grep -O'touch pwned' x", "of `git grep`"),
    ("git grep --open-files-in-pager='touch pwned' x", "--open-files-in-pager"),
    ("git difftool -x 'touch pwned'", "not one of the git commands allowed"),
    ("git bisect run touch pwned", "`git bisect run` runs"),
    ("git submodule foreach 'touch pwned'", "`git submodule foreach` runs"),
    ("git filter-branch --tree-filter 'touch pwned'", "not one of the git commands allowed"),
    ("git instaweb --httpd='touch pwned'", "not one of the git commands allowed"),
    ("git web--browse --cmd='touch pwned' x", "not one of the git commands allowed"),
    ("git send-email --sendmail-cmd='touch pwned' x", "not one of the git commands allowed"),
    ("git daemon --access-hook=/tmp/x", "not one of the git commands allowed"),
    ("git remote-ext x 'touch pwned'", "not one of the git commands allowed"),
    ("git maintenance start", "not one of the git commands allowed"),
    ("git difftool --extcmd='touch pwned'", "not one of the git commands allowed"),
    ("git hook run pre-commit", "not one of the git commands allowed"),
    ("git for-each-repo --config=x.y log", "not one of the git commands allowed"),
    ("git st", "not one of the git commands allowed"),  # an alias: `!sh …` in a config
    ("git log --output=.git/config", "--output"),
    ("git config alias.x '!touch pwned'", "may only read"),
    ("git config --add core.fsmonitor 'touch pwned'", "may only read"),
    ("git config --global core.pager 'touch pwned'", "may only read"),
    ("git status; git -c alias.x=!sh x", "global option -c"),
    ("GIT_SSH_COMMAND='touch pwned' git fetch ssh://h/r", "is not allowed"),
    ("GIT_CONFIG_PARAMETERS=\"'alias.x=!sh'\" git x", "is not allowed"),
    ("GIT_DIR=/tmp/planted git status", "is not allowed"),
    ("env GIT_EXTERNAL_DIFF='touch pwned' git diff", "is not allowed"),
]


@pytest.mark.parametrize(("command", "why"), GIT_ESCAPES)
def test_git_prefix_rules_refuse_every_way_git_runs_a_command(command: str, why: str) -> None:
    with pytest.raises(CommandRefused, match=re.escape(why)):
        check(command, GIT)


@pytest.mark.parametrize(
    "command",
    [
        "git -c alias.x='!touch pwned' x",
        "git fetch --upload-pack='touch pwned;' ../repo",
        "git fetch $X--upload-pack='touch pwned;' ../repo",
        "git fetch {--upload-pack='touch pwned;',../repo}",
        "git fetch \\\n--upload-pack='touch pwned;' ../repo",
        "git -c core.hooksPath=../hooks commit --allow-empty -m x",
    ],
)
def test_a_git_restricted_bash_runs_none_of_the_escapes_for_real(
    tmp_path: Path, command: str
) -> None:
    """The escapes, played through the bash tool against real git and real repositories:
    each one, unrefused, would create `pwned`."""
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "pre-commit").write_text("#!/bin/sh\ntouch pwned\n")
    (hooks / "pre-commit").chmod(0o755)
    workspace = tmp_path / "ws"
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    bash = Bash(ToolContext(workspace, bash_allow=GIT))

    output = bash.run({"command": command})
    assert output.is_error and output.text.startswith("command refused: ")
    assert not (workspace / "pwned").exists()


@pytest.mark.parametrize(
    "command",
    [
        "git --no-pager log --oneline -5",
        "git -P diff --stat HEAD~1 -- ./*.py",
        "git config user.name",
        "git config --get remote.origin.url",
        "git add -u && git commit -m 'fix: x -c y'",
        "git log --cc --reverse --ext-diff",
        "git clone /tmp/repo x",
        "git grep -n -e needle -- src/",
        "git rebase -i HEAD~2",
        "git --version",
    ],
)
def test_git_prefix_rules_still_allow_ordinary_git(command: str) -> None:
    check(command, GIT)


def test_a_git_restricted_bash_ignores_a_repository_planted_in_the_workspace(
    tmp_path: Path,
) -> None:
    """A writing child plants a bare repository's files (no `.git`) in the workspace, with
    a core.sshCommand that runs a shell command: git, run by an agent held to
    Bash(git:*), does not take the workspace for a repository, so its config is not read."""
    (tmp_path / "objects").mkdir()
    (tmp_path / "refs").mkdir()
    (tmp_path / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "config").write_text("[core]\n\tbare = true\n\tsshCommand = touch pwned #\n")
    bash = Bash(ToolContext(tmp_path, bash_allow=GIT))

    output = bash.run({"command": "git ls-remote ssh://localhost/x"})
    assert output.is_error and "Could not read from remote repository" in output.text
    assert not (tmp_path / "pwned").exists()


def test_a_git_restricted_bash_finds_no_git_planted_in_its_path(tmp_path: Path) -> None:
    """PATH names folders the agent can write (a relative one, the workspace's, as an
    activated virtualenv there would): a `git` planted in them is not the one that runs."""
    planted = tmp_path / "bin"
    planted.mkdir()
    (planted / "git").write_text("#!/bin/sh\ntouch pwned\n")
    (planted / "git").chmod(0o755)
    path = f"bin:{planted}:{os.defpath}"
    bash = Bash(ToolContext(tmp_path, env={"PATH": path}, bash_allow=GIT))

    output = bash.run({"command": "git --version"})
    assert "git version" in output.text and not output.is_error
    assert not (tmp_path / "pwned").exists()


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
            return tool_reply("Bash", {"command": "git --version && rm -f precious.txt"})
        if req.turn == 1:
            return tool_reply("Bash", {"command": "git --version"})
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
            return tool_reply("Bash", {"command": "touch made.txt"})
        return text_reply(f"{','.join(req.tool_names)} | {req.tool_results[0]['content']}")

    api_server.handler = handler
    done = run_cli(
        ["task", "--agent", "planner", "plan", "-C", str(workspace)],
        cli_env(api_server, HOME=str(tmp_path / "home")),
        cwd=workspace,
        input="",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Bash,Read,Glob,Grep | ")
    assert "Permission denied" in done.stdout or "Read-only" in done.stdout
    assert not (workspace / "made.txt").exists()
