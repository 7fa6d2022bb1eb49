"""What the commands share: option bundles, prompt reading, errors, running a session."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from isoagent.parent.batch.input import unknown_agent
from isoagent.parent.cli.exit_codes import ExitCode
from isoagent.protocol import Limits

if TYPE_CHECKING:
    from isoagent.parent.agent_files import AgentCatalog
    from isoagent.parent.children.forkserver import ForkServer
    from isoagent.parent.events import Sink
    from isoagent.parent.model.gateway import ModelSource
    from isoagent.parent.session import Session, Settings
    from isoagent.protocol import AgentSpec

DEFAULT_MODEL = "claude-sonnet-5"

SessionBody = Callable[["Session"], Awaitable[int]]


def fail(message: str, code: int = ExitCode.ERROR) -> NoReturn:
    """One clear line on stderr and a non-zero exit."""
    click.echo(f"isoagent: {message}", err=True)
    sys.exit(code)


def read_prompt(prompt: str) -> str:
    """``-`` means stdin; an empty prompt is a usage error. Bytes that are not UTF-8
    (in the argument or on stdin) become U+FFFD."""
    if prompt == "-":
        if sys.stdin is None:
            fail("reading the prompt from stdin, but stdin is closed", ExitCode.USAGE)
        if sys.stdin.isatty():
            fail("reading the prompt from stdin, but stdin is a terminal", ExitCode.USAGE)
        prompt = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    prompt = prompt.encode("utf-8", "surrogateescape").decode("utf-8", errors="replace")
    if not prompt.strip():
        fail("the prompt is empty", ExitCode.USAGE)
    return prompt


def agent_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options every model-backed command shares."""
    options = [
        click.option(
            "--model", envvar="ISOAGENT_MODEL", default=DEFAULT_MODEL, show_default=True,
            help="Model for the parent and for children whose agent type names none "
            "[env ISOAGENT_MODEL].",
        ),
        click.option(
            "--max-turns", type=click.IntRange(0), default=0,
            help="Turn limit per agent; 0 (the default, as in Claude Code): none, the "
            "timeout and the token budget still hold. An agent file's maxTurns wins.",
        ),
        click.option(
            "--workdir", "-C",
            type=click.Path(exists=True, file_okay=False, resolve_path=True, path_type=Path),
            default=".", help="Workspace the agents work in (default: the current directory).",
        ),
        click.option(
            "--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True,
            help="Wall-clock seconds per child before its processes are ended.",
        ),
        click.option(
            "--max-parallel", type=click.IntRange(1), default=4, show_default=True,
            help="Children running at once.",
        ),
        click.option(
            "--agents-dir", "agents_dirs", multiple=True,
            type=click.Path(exists=True, file_okay=False, path_type=Path),
            help="Another folder of agent files (*.md, Claude Code format); repeatable.",
        ),
        click.option("-v", "--verbose", is_flag=True, help="Show every tool call on stderr."),
        *LIMIT_OPTIONS,
        click.option(
            "--record", type=click.Path(dir_okay=False, path_type=Path),
            help="Write every model call (request and response) to this JSONL file.",
        ),
        click.option(
            "--replay", type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="Answer model calls from a file written by --record: no network, no key.",
        ),
        click.option(
            "--replay-match", type=click.Choice(["strict", "loose"]), default="strict",
            show_default=True,
            help="loose: ignore tool outputs when matching a replayed call.",
        ),
    ]  # fmt: skip
    return _apply(options, fn)


LIMIT_OPTIONS = [
    click.option(
        "--sandbox", type=click.Choice(["auto", "off", "workspace", "read-only"]),
        default="auto", show_default=True,
        help="OS sandbox for children (Landlock). auto: agents without write tools are "
        "read-only, the others may write only in the workspace.",
    ),
    click.option(
        "--allow-unsandboxed", is_flag=True,
        help="Run read-only agents unconfined where the kernel has no Landlock.",
    ),
    click.option(
        "--child-network", type=click.Choice(["on", "off"]), default="on", show_default=True,
        help="off: children run in an empty network namespace (they never need one for the model).",
    ),
    click.option(
        "--max-tokens-total", type=click.IntRange(0), default=0,
        help="Token budget for the whole run (0: none); past it agents end with status budget.",
    ),
    click.option(
        "--cpu-seconds", type=click.IntRange(0), default=900, show_default=True,
        help="CPU-time limit per child process and per command it runs (0: none).",
    ),
    click.option(
        "--memory-mb", type=click.IntRange(0), default=8192, show_default=True,
        help="Address-space limit per child process and command, in MiB (0: none).",
    ),
    click.option(
        "--max-processes", type=click.IntRange(0), default=512, show_default=True,
        help="Process limit (RLIMIT_NPROC; the kernel does not apply it to root) (0: none).",
    ),
    click.option(
        "--max-file-size-mb", type=click.IntRange(0), default=4096, show_default=True,
        help="Largest file a child's command may write, in MiB (0: none).",
    ),
]  # fmt: skip


def output_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    return _apply(
        [
            click.option(
                "--output-format",
                type=click.Choice(["text", "json", "stream-json"]),
                default="text",
                show_default=True,
                help="text: the answer; json: one object at the end; "
                "stream-json: one JSON line per event.",
            )
        ],
        fn,
    )


def _apply(options: list[Callable[..., Any]], fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(options):
        fn = option(fn)
    return fn


def load_catalog(workdir: Path, agents_dirs: tuple[Path, ...]) -> AgentCatalog:
    """Built-in and file-defined agent types; file problems are reported, never fatal."""
    from isoagent.parent.agent_files import load_agents

    catalog = load_agents(workdir, extra_dirs=agents_dirs)
    for warning in catalog.warnings:
        click.echo(f"isoagent: warning: {warning}", err=True)
    for error in catalog.errors:
        click.echo(f"isoagent: agent file skipped: {error.describe()}", err=True)
    return catalog


def build_settings(options: dict[str, Any]) -> Settings:
    from isoagent.parent.session import Settings

    limits = Limits(
        max_turns=options["max_turns"],
        cpu_seconds=options["cpu_seconds"],
        address_space_mb=options["memory_mb"],
        max_processes=options["max_processes"],
        file_size_mb=options["max_file_size_mb"],
        network=options["child_network"] == "on",
    )
    return Settings(
        workdir=options["workdir"],
        model=options["model"],
        limits=limits,
        timeout=options["timeout"],
        max_parallel=options["max_parallel"],
        max_tokens_total=options["max_tokens_total"],
        sandbox=options["sandbox"],
        allow_unsandboxed=options["allow_unsandboxed"],
        agents=load_catalog(options["workdir"], options["agents_dirs"]).agents,
        child_command=shlex.split(os.environ.get("ISOAGENT_CHILD_COMMAND", "")) or None,
    )


def model_source(options: dict[str, Any]) -> ModelSource:
    """Replayed, or the SDK (credentials from the environment), optionally recorded."""
    from isoagent.parent.model.cassette import CassetteError
    from isoagent.parent.model.sdk import AnthropicSource, MissingCredentials

    try:
        if options["replay"] is not None:
            from isoagent.parent.model.cassette import ReplaySource

            source: ModelSource = ReplaySource(options["replay"], options["replay_match"])
        else:
            source = AnthropicSource()
        if options["record"] is not None:
            from isoagent.parent.model.cassette import RecordingSource

            source = RecordingSource(source, options["record"])
    except (MissingCredentials, CassetteError) as exc:
        fail(str(exc))
    return source


def run_session(
    options: dict[str, Any],
    settings: Settings,
    body: SessionBody,
    *,
    sinks: Sequence[Sink] = (),
    progress: bool = True,
) -> int:
    """Open a session with ``sinks`` (and the progress display) and run ``body`` in it,
    under signal handling."""
    from isoagent.parent.children.forkserver import ForkServerUnavailable
    from isoagent.parent.children.launch import fork_server_for, nesting_depth
    from isoagent.parent.children.sandbox_policy import unsandboxed_warning
    from isoagent.parent.cli.display import ProgressDisplay

    if nesting_depth() >= 1:
        fail("refusing to start model-backed work inside an isoagent child (nesting depth 1)")
    fork_server = fork_server_for(settings.child_command)
    try:
        if fork_server is not None:  # it loads while the SDK is imported
            with contextlib.suppress(ForkServerUnavailable):
                fork_server.launch()
        source = model_source(options)
        if warning := unsandboxed_warning(settings.sandbox):
            click.echo(f"isoagent: {warning}", err=True)
        if progress:
            sinks = [*sinks, ProgressDisplay(verbose=options["verbose"])]
        main = functools.partial(session_main, settings, source, fork_server, sinks, body)
        return run_with_signals(main)
    finally:  # session_main closes it too; this is for a failure before the session
        if fork_server is not None:
            fork_server.close()


async def session_main(
    settings: Settings,
    source: ModelSource,
    fork_server: ForkServer | None,
    sinks: Sequence[Sink],
    body: SessionBody,
) -> int:
    """Open a session, attach ``sinks`` before its first event, and run ``body`` in it;
    then close ``fork_server``, whatever the end."""
    from isoagent.parent.session import Session

    try:
        session = Session(settings, source, fork_server)
    except OSError as exc:
        fail(f"cannot create the run folder in {settings.runs_dir}: {exc.strerror or exc}")
    session.events.sinks.extend(sinks)
    session.start()
    try:
        return await body(session)
    except asyncio.CancelledError:
        where = session.run.display(session.run.path)
        click.echo(f"isoagent: interrupted; transcripts so far are in {where}", err=True)
        raise
    finally:
        if fork_server is not None:
            fork_server.close()


def run_with_signals(main: Callable[[], Awaitable[int]]) -> int:
    """Run ``main``; SIGINT and SIGTERM cancel it, which ends every child; exit 130/143."""
    received: list[int] = []

    async def guarded() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def stop(sig: int) -> None:
            received.append(sig)
            task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop, sig)
        try:
            return await main()
        except asyncio.CancelledError:
            return 128 + (received[0] if received else signal.SIGINT)

    return asyncio.run(guarded())


def pick_agent(agents: Mapping[str, AgentSpec], name: str) -> AgentSpec:
    """The agent type called ``name``; an unknown name is a usage error."""
    agent = agents.get(name)
    if agent is None:
        fail(unknown_agent(name, agents), ExitCode.USAGE)
    return agent


def describe(prompt: str, width: int = 50) -> str:
    """A short title for the display and the transcript: the prompt's first line."""
    line = prompt.strip().splitlines()[0].strip()
    return line if len(line) <= width else line[: width - 3] + "..."
