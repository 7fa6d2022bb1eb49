"""``isoagent trust [DIR]``: trust a workspace's own files (``.mcp.json``, the settings files,
agent files that bring MCP servers) as they are now; ``--list`` what is trusted, ``--revoke``
forget a workspace. And the question ``run``, ``task`` and ``batch`` ask on a terminal.

The record is by content (``parent/trust/record.py``): a file that changes is asked about
again. Nothing else of the workspace needs trust: its files are the children's to read, in
their sandbox.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from isoagent.parent.cli.errors import fail
from isoagent.parent.records.terminal_text import terminal_line
from isoagent.parent.trust import record
from isoagent.parent.trust.workspace import WorkspaceFile, workspace_files


@click.command()
@click.argument(
    "folder",
    required=False,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option("--list", "listing", is_flag=True, help="List the trusted workspaces and files.")
@click.option("--revoke", is_flag=True, help="Forget FOLDER (default: this one).")
def trust(folder: Path | None, listing: bool, revoke: bool) -> None:
    """Trust a workspace's .mcp.json, settings and agent files' servers as they are now.

    FOLDER (default: the current one): its .mcp.json servers, its .claude/settings*.json
    hooks and permissions, its agent files' MCP servers. A change to any of them asks again;
    --trust trusts for one run."""
    if listing:
        if folder is not None or revoke:
            fail("--list takes no FOLDER and no --revoke")
        _list()
        return
    workdir = Path(os.path.realpath(folder or "."))
    try:
        if revoke:
            said = "forgotten" if record.revoke(workdir) else "was not trusted"
            click.echo(f"isoagent: {terminal_line(str(workdir))} {said}", err=True)
            return
        files = list(_files(workdir).values())
        record.trust(workdir, {f.name: f.digest for f in files}, replace=True)
    except record.TrustRecordError as exc:
        fail(str(exc))
    if not files:
        click.echo(
            f"isoagent: {terminal_line(str(workdir))} trusted; none of its files runs or "
            "grants anything now",
            err=True,
        )
        return
    click.echo(f"isoagent: trusted {terminal_line(str(workdir))} as it is now:", err=True)
    _describe(files)
    click.echo("A change to any of these files asks again.", err=True)


def _files(workdir: Path) -> dict[str, WorkspaceFile]:
    """Every file of ``workdir`` that needs trust, with the agent files of its own."""
    from isoagent.parent.claude_code.agent_files import load_agents

    agents = load_agents(workdir, user=False, project=True).agents
    return workspace_files(workdir, agents)


def _list() -> None:
    try:
        workspaces = record.recorded()
    except record.TrustRecordError as exc:
        fail(str(exc))
    if not workspaces:
        click.echo("isoagent: no workspace is trusted", err=True)
    for path, entry in sorted(workspaces.items()):
        workdir = Path(path)
        now = _files(workdir) if workdir.is_dir() else {}
        digests = entry.get("files") or {}
        states = []
        for name, digest in sorted(digests.items()):
            changed = name in now and now[name].digest != digest
            states.append(f"{name}{' (changed: asks again)' if changed else ''}")
        states += [f"{name} (new: asks)" for name in sorted(set(now) - set(digests))]
        files = ", ".join(states) or "no file that runs or grants anything"
        click.echo(terminal_line(f"{path}  {entry.get('trusted', '')}  {files}"))


def _describe(files: Sequence[WorkspaceFile]) -> None:
    for file in files:
        click.echo(
            f"  {terminal_line(file.name)}: {terminal_line('; '.join(file.brings))}", err=True
        )


def ask_on_terminal(workdir: Path, files: Sequence[WorkspaceFile]) -> bool:
    """The question, on a terminal (stdin and stderr both one): y records the files' trust,
    the default no leaves them out. Off a terminal (or with stdin closed: None), no."""
    if sys.stdin is None or not (sys.stdin.isatty() and sys.stderr.isatty()):
        return False
    click.echo(
        f"isoagent: {terminal_line(str(workdir))} is not trusted yet; its files would run or "
        "grant this:",
        err=True,
    )
    _describe(files)
    question = "Trust them (recorded by content: a change asks again)?"
    return click.confirm(question, default=False, err=True)  # Ctrl-C, Ctrl-D: Abort
