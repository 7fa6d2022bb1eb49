"""One invocation: its run folder, gateway, supervisor, fork server, signals and final records.

Every command, the demo and the Python API go through ``Session.open``; only what they ask of
the session differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import resource
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence

import msgspec

from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS, TASK_TOOL
from isoagent.child.agent.loop import Agent
from isoagent.child.agent.process_tree import TAG_VARIABLE
from isoagent.child.agent.spans import current_span
from isoagent.child.agent.tools import make_tools
from isoagent.child.agent.tools.base import ToolContext
from isoagent.child.agent.tools.workspace import add_dirs_note
from isoagent.child.confine_command import Confinement, command_prefix
from isoagent.child.identity import allowed_environment
from isoagent.child.sandbox.privileges import make_undumpable
from isoagent.parent.agent.bridge import GatewayBridge, run_in_thread
from isoagent.parent.agent.cost_budget import TOKENS, BudgetedSource, SharedBudget, usd_rates
from isoagent.parent.agent.hands import HANDS_LOG, Hands, handed
from isoagent.parent.agent.hooks import SessionHooks
from isoagent.parent.agent.parent_agent import (
    allowed_spec,
    conversation_to_resume,
    interrupted_turn,
    parent_mcp_tools,
    parent_prompt,
    parent_tools,
)
from isoagent.parent.agent.permission_prompt import Ask, asking_tools, noticed
from isoagent.parent.agent.send_message import SendMessageTool
from isoagent.parent.agent.structured_output import ENFORCE as ENFORCE_STRUCTURED
from isoagent.parent.agent.structured_output import StructuredOutputTool
from isoagent.parent.agent.task_tool import TaskTool
from isoagent.parent.children.egress_proxy import EgressPolicy, EgressProxy, once_per_host
from isoagent.parent.children.forkserver import ForkServer, ForkServerUnavailable
from isoagent.parent.children.launch import child_environment, fork_server_for, nesting_depth
from isoagent.parent.children.sandbox_policy import (
    SandboxRefused,
    mechanism_warnings,
    network_warning,
    policy_for,
    unsandboxed_warning,
)
from isoagent.parent.children.supervisor import Supervisor
from isoagent.parent.model.conversation import ConversationRecorder
from isoagent.parent.model.gateway import Gateway, ModelSource
from isoagent.parent.model.prices import BATCH_PRICE
from isoagent.parent.model.retry import WaitNotices
from isoagent.parent.records.events import (
    Broadcast,
    ChildFinished,
    ChildStarted,
    Event,
    MessageAdded,
    RunFinished,
    RunStarted,
    Sink,
)
from isoagent.parent.records.run_folder import RunFolder, TranscriptWriter
from isoagent.parent.records.run_seal import seal_for
from isoagent.parent.records.terminal_text import warn
from isoagent.parent.settings import Settings
from isoagent.parent.telemetry.config import TelemetryUnavailable
from isoagent.parent.telemetry.run_trace import RunTrace
from isoagent.protocol import Message, Result, SandboxPolicy, ToolResultBlock, Usage

# the signals that end a run: each cancels the session's task, which ends every child
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
ANSWERED_GRACE = 5.0  # seconds a child whose last answer is in has to send its Result

PARENT_PROMPT = """\
You are isoagent, a coding agent working in the directory {workdir}.
You can run shell commands and read, write, edit and search files. You also have an `Agent` tool \
that hands a self-contained piece of work to a subagent running in its own process; only its \
final summary comes back to you. Delegate exploration and independent subtasks to keep your \
context small, and launch independent subagents in one message so they run concurrently. \
When you are done, answer the user directly and concisely."""


class SessionError(Exception):
    """The session could not start: no credentials, a bad recording, no run folder, nesting."""


class Interrupted(Exception):
    """A signal ended the session; the exit status is 128 + its number, as a shell's.

    SIGPIPE stands for stdout's reader going away (``Session.stop``): that end is quiet.
    """

    def __init__(self, signum: int, run_dir: str) -> None:
        super().__init__(f"interrupted; transcripts so far are in {run_dir}")
        self.exit_code = 128 + signum
        self.quiet = signum == signal.SIGPIPE


def leave_the_terminal() -> None:
    """SIGHUP: the terminal is gone (or going). What was written to it now goes nowhere, so
    that the run's ending (its children ended, its records, exit 129) is not cut short by
    the first line it would have said there (EIO: it exited 1, its run unfinished)."""
    try:
        nowhere = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        for fd in (1, 2):
            with contextlib.suppress(OSError):
                if os.isatty(fd) or _gone(fd):
                    os.dup2(nowhere, fd)
    finally:
        os.close(nowhere)


def _gone(fd: int) -> bool:
    """Whether ``fd`` was a terminal that hung up (it answers EIO)."""
    try:
        os.fstat(fd)
        os.write(fd, b"")
    except OSError as exc:
        return exc.errno == errno.EIO
    return False


def raise_open_files_limit() -> None:
    """The soft limit on open files up to the hard one: what the parent holds for its
    children is bounded per child, and the usual soft 1024 would bound their number."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def model_source(
    settings: Settings, waits: WaitNotices | None = None, live: Callable[[], int] | None = None
) -> ModelSource:
    """Replayed, or the SDK (credentials from the environment), optionally recorded; with
    ``api_batches``, the SDK's Message Batches, sent when the ``live`` children all wait."""
    from isoagent.parent.model import warm
    from isoagent.parent.model.cassette import CassetteError, RecordingSource, ReplaySource
    from isoagent.parent.model.sdk import MissingCredentials, check_credentials

    try:
        if settings.replay is not None:
            source: ModelSource = ReplaySource(settings.replay, settings.replay_match)
        elif settings.api_batches:
            from isoagent.parent.model.batch_journal import BatchJournal
            from isoagent.parent.model.batches import BatchSource
            from isoagent.parent.model.sdk import AnthropicSource

            journal = None
            if settings.batch_journal is not None:
                try:
                    journal = BatchJournal(settings.batch_journal)
                except OSError as exc:
                    why = exc.strerror or exc
                    raise SessionError(f"cannot open {settings.batch_journal}: {why}") from None
            source = BatchSource(
                AnthropicSource(),
                window=settings.batch_window,
                live=live,
                on_wait=waits,
                journal=journal,
            )
        else:
            check_credentials()
            if settings.fallback_model:  # the warm gateway's calls carry no fallback
                retrying = warm.in_process(settings.api_retry_deadline, waits)
                retrying.fallback = (settings.model, settings.fallback_model)
                source = retrying
            else:
                source = warm.connect(settings.api_retry_deadline, waits)
        if settings.record is not None:
            source = RecordingSource(source, settings.record)
    except (MissingCredentials, CassetteError) as exc:
        raise SessionError(str(exc)) from None
    return source


def price_rate(settings: Settings) -> float:
    """Of the price, what a session's model calls cost: half in Message Batches (not
    replayed). The one rule every cost figure of the session prices by."""
    return BATCH_PRICE if settings.api_batches and settings.replay is None else 1.0


class Session:
    def __init__(
        self, settings: Settings, source: ModelSource, fork_server: ForkServer | None
    ) -> None:
        """Use ``Session.open``, which also starts and ends what the session owns."""
        self.settings = settings
        self.run = RunFolder.create(settings.runs_dir, (settings.workdir, *settings.add_dirs))
        # the conversation's id: a UUID, as Claude Code's, unless it goes on with another
        self.session_id = settings.session_id or str(uuid.uuid4())
        self.events = Broadcast()
        log = self.run.path / "run.jsonl"
        self.log = TranscriptWriter(log, self.run.opener(log), seal_for(self.run))
        self.events.sinks.append(self._log_run_event)
        # of the price, what its model calls cost: half in Message Batches (not replayed)
        self.price_rate = price_rate(settings)
        self.parent_running = False  # the parent agent shares the budgets while it runs
        # a batch's: on a signal, the children whose answer is in may send their Result
        # before the session ends (their lines are written, their tasks not paid again)
        self.answers_kept = False
        self.cost_budget: BudgetedSource | None = None
        self.token_budget: BudgetedSource | None = None
        if settings.max_tokens_total:
            tokens = SharedBudget(settings.max_tokens_total, running=self.sharers)
            name = f"--max-tokens-total {settings.max_tokens_total}"
            source = self.token_budget = BudgetedSource(
                source, tokens, TOKENS, name, between_calls=settings.budget_between_calls
            )
        if settings.max_budget_usd:
            usd = SharedBudget(settings.max_budget_usd, settings.budget_spent, self.sharers)
            self.cost_budget = BudgetedSource(
                source, usd, usd_rates(self.price_rate), f"${settings.max_budget_usd:g}",
                between_calls=settings.budget_between_calls,
            )  # fmt: skip
            source = self.cost_budget
        self.gateway = Gateway(source, max_concurrent=max(settings.max_parallel, 1) + 1)
        self.fork_server = fork_server
        self.supervisor = Supervisor(
            settings, gateway=self.gateway, run=self.run, sink=self.events, fork_server=fork_server
        )
        self.waits = WaitNotices()  # what model calls wait on (a rate limit, an overload)
        self.trace: RunTrace | None = None  # OpenTelemetry's, when the environment asks
        try:
            self.trace = RunTrace.open(os.environ, self.run.run_id)
        except TelemetryUnavailable as exc:
            warn(f"warning: telemetry is off: {exc}")
        if self.trace is not None:
            self.trace.price_rate = self.price_rate
            self.gateway.on_call = self.trace.model_call
            self.supervisor.trace = self.trace
        self.signal = 0  # the signal that ended the session, if one did
        # set (from any thread) to end the parent's turn: it stops at its next step, with
        # status cancelled and its result (see ``interrupt``)
        self.stop_parent = threading.Event()
        self._bridge: GatewayBridge | None = None  # the parent's, while it runs
        self._loop = asyncio.get_running_loop()
        self.final: RunFinished | None = None  # the run's last record, once written
        self.terminal_reason = ""  # why the parent's turn ended, where its status does not say
        self.structured: StructuredOutputTool | None = None  # --json-schema's, once made
        self.ask: Ask | None = None  # who the parent's calls are asked of (the SDK's can_use_tool)
        self.hooks: SessionHooks | None = None  # --settings' and the SDK's hooks, if any
        if settings.hooks:
            planted = self.supervisor.planted  # swept before any hook runs
            sweep = planted.sweep if planted is not None else None
            hooks = dataclasses.replace(settings.hooks, before=sweep)
            self.hooks = SessionHooks(
                hooks, self.session_id, str(log), str(settings.workdir), settings.permission_mode
            )
            self.supervisor.hooks = self.hooks
        self.started = time.monotonic()
        self._task: asyncio.Task[object] | None = None  # the body's, while it runs
        self._ending: asyncio.Future[None] | None = None  # an interrupt's end of the children

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        settings: Settings,
        *,
        source: ModelSource | None = None,
        sinks: Sequence[Sink] = (),
        signals: bool = True,
    ) -> AsyncIterator[Session]:
        """A started session with ``sinks`` attached before its first event; on the way out,
        whatever the end, its fork server is closed. With ``signals`` (the CLI's), SIGINT,
        SIGTERM and SIGHUP cancel the task that opened it, which ends every child, and leave
        as ``Interrupted``. Without (the Python API's: the signals are its caller's), the
        session installs no handler; cancelling the task that opened it (as ``asyncio.run``
        does on Ctrl-C) ends every child just the same and leaves as ``CancelledError``.

        ``source``: the model (default: from ``settings``: a replay, or the SDK); the
        session closes it.
        """
        if nesting_depth() >= 1:
            raise SessionError(
                "refusing to start model-backed work inside an isoagent child (nesting depth 1)"
            )
        make_undumpable()  # this process holds the key: its environ and memory, not for children
        raise_open_files_limit()
        fork_server = fork_server_for(settings.child_command)
        proxy: EgressProxy | None = None
        trace: RunTrace | None = None
        try:
            if settings.child_network == "on":
                policy = EgressPolicy(settings.allowed_domains, settings.local_fetch_hosts)
                # no connection of a child needs to outlast the child
                proxy = EgressProxy(policy, once_per_host(warn), settings.timeout)
                settings = dataclasses.replace(settings, egress_socket=proxy.path)
            if fork_server is not None:  # it loads while the SDK is imported
                with contextlib.suppress(ForkServerUnavailable):
                    fork_server.launch()
            waits = WaitNotices()
            if source is None:  # its batches go when every child of the session waits
                source = model_source(settings, waits, lambda: session.supervisor.running)
            for warning in (
                unsandboxed_warning(settings.sandbox),
                *mechanism_warnings(settings.sandbox, settings.child_network == "host"),
                network_warning(settings.child_network),
            ):
                if warning:
                    warn(warning)
            try:
                session = cls(settings, source, fork_server)
            except OSError as exc:
                where = settings.runs_dir
                raise SessionError(
                    f"cannot create the run folder in {where}: {exc.strerror or exc}"
                ) from None
            session.waits = waits
            trace = session.trace
            if proxy is not None:
                proxy.on_over_budget = session.supervisor.over_budget
            session.events.sinks.extend(sinks)
            session._task = asyncio.current_task()
            if signals:
                session._stop_on_signals()
            session._start()
            try:
                yield session
            except asyncio.CancelledError:
                if not session.signal:
                    raise
            finally:
                session._task = None  # a signal from here on cancels nothing
                # a run's children live in tasks of their own: end them while the fork
                # server can still tell their ends, before the event loop shuts down
                try:
                    await session.supervisor.end_all()
                finally:
                    await session.supervisor.close()
                    session.run.close()  # no file is created in it any more
                    await source.aclose()
            try:
                if session.signal:
                    session._record_interruption()
                    raise Interrupted(session.signal, session.run.display(session.run.path))
            finally:
                session.log.close()
        finally:
            if fork_server is not None:
                fork_server.close()
            if proxy is not None:
                proxy.close()
            if trace is not None:  # after the run's last record
                trace.close()

    def sharers(self) -> list[str]:
        """The agents that share the run's budgets now: the children starting or running,
        by id, and the parent ("") while it runs."""
        return [*self.supervisor.sharing, *([""] if self.parent_running else [])]

    def stop(self, signum: int) -> None:
        """End the session as ``signum`` does (exit 128 + ``signum``): the task that opened it
        is cancelled, which ends every child. Only the first call counts: a second Ctrl-C
        does not cut short the clean-up the first one started."""
        if self._task is None or self.signal:
            return
        self.signal = signum
        if signum == signal.SIGHUP:
            leave_the_terminal()
        if self.answers_kept and signum != signal.SIGPIPE:
            why = f"interrupted ({signal.Signals(signum).name})"
            ending = self.supervisor.let_answered_finish(why, ANSWERED_GRACE)
            self._ending = asyncio.ensure_future(ending)
            self._ending.add_done_callback(lambda _: self._cancel())
            return
        # at the task's next wait, also when called from the task itself (a sink whose
        # reader went away): then the session may be ending already, and must not be cut
        asyncio.get_running_loop().call_soon(self._cancel)

    def interrupt(self) -> None:
        """The SDK's interrupt, from any thread: the parent's turn ends at its next step and
        every running child is ended now (its ``Agent`` call returns cancelled)."""
        self.stop_parent.set()
        if self._bridge is not None:  # an answer under way is not waited for
            self._bridge.abort()
        self._loop.call_soon_threadsafe(self._end_children)

    def stop_child(self, child: str) -> bool:
        """The SDK's ``stop_task``, from another thread: end child ``child`` alone; False
        when no such child is running."""
        ask = asyncio.run_coroutine_threadsafe(self._stop_child(child), self._loop)
        return ask.result()

    async def _stop_child(self, child: str) -> bool:
        return self.supervisor.stop(child)

    def _end_children(self) -> None:
        self._ending = asyncio.ensure_future(self.supervisor.end_all())

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _stop_on_signals(self) -> None:
        """Signals stop the current task from now on; the handlers stay until the loop
        closes, so a late signal is not a traceback."""
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, self.stop, signum)

    def _record_interruption(self) -> None:
        """The run's last record says it was interrupted, and by what (unless it had ended)."""
        if self.final is not None:
            return
        why = signal.Signals(self.signal).name
        if self.signal == signal.SIGPIPE:
            why = "stdout's reader went away"
        self.finish(
            Result(
                summary="",
                status="cancelled",
                turns=0,
                tool_calls=0,
                usage=self.gateway.usage,
                duration=round(time.monotonic() - self.started, 3),
                error=f"interrupted ({why})",
            )
        )

    def _log_run_event(self, event: Event) -> None:
        """run.jsonl holds the run's own story; children's messages live in their transcripts."""
        if isinstance(event, RunStarted | RunFinished | ChildStarted | ChildFinished) or (
            getattr(event, "child", None) == ""
        ):
            self.log(event)

    @property
    def trace_id(self) -> str:
        """The run's OpenTelemetry trace id, in hex ("": telemetry is off)."""
        return self.trace.trace_id_hex if self.trace is not None else ""

    def _start(self) -> None:
        if self.trace is not None:  # what the session's task starts is under the run's span
            current_span.set(self.trace.run_span)
        if self.fork_server is not None:  # it imports while the first model call is made
            with contextlib.suppress(ForkServerUnavailable):
                self.fork_server.start()
        self.events(
            RunStarted(
                run_id=self.run.run_id,
                run_dir=self.run.display(self.run.path),
                model=self.settings.model,
                workdir=str(self.settings.workdir),
                agents=list(self.settings.agents),
                session_id=self.session_id,
                batch_input=self.settings.batch_input,
                trace_id=self.trace_id,
                price_rate=self.price_rate,
            )
        )

    def finish(self, result: Result) -> RunFinished:
        answer = None  # --json-schema's, once the run ends well
        if self.structured is not None and result.status == "ok":
            answer = self.structured.value
        final = RunFinished(
            result=result,
            run_dir=self.run.display(self.run.path),
            children=list(self.supervisor.finished),
            api_seconds=self.gateway.api_seconds,
            retries=self.gateway.retries,
            structured_output=answer,
            structured_output_failed=self.structured is not None and self.structured.exhausted,
            trace_id=self.trace_id,
            api_error=self.gateway.failures.get("") if result.status == "error" else None,
            terminal_reason=self.terminal_reason,
        )
        if self.trace is not None:
            self.trace.finish(result)
        self.final = final
        self.events(final)
        return final

    def _close_interrupted(self, messages: list[Message], turn: int, answering: bool) -> None:
        """The turn an interrupt cut stays in the conversation (the next message goes on
        with it), closed as Claude Code closes it; ``answering``: the model was."""
        closing = interrupted_turn(messages, answering)
        self.terminal_reason = "aborted_streaming" if answering else "aborted_tools"
        self.events(MessageAdded(closing.role, closing.content, turn))

    def failed_after(self, final: RunFinished, error: str) -> None:
        """The command failed once its run had ended (its answer could not be written): the
        run's last record says so, as ``logs`` shows it."""
        result = msgspec.structs.replace(final.result, status="error", error=error)
        self.log(msgspec.structs.replace(final, result=result, timestamp=None))

    def command_environment(self) -> dict[str, str]:
        """The parent's own commands and MCP servers: the allow-list a child's environment
        has (no key, no token, no loader's variable), tagged with the run so what they leave
        running can be ended."""
        return {**allowed_environment(), TAG_VARIABLE: f"run-{self.run.run_id}"}

    async def run_parent(self, prompt: str) -> Result:
        """The parent agent: the child's loop, plus ``Agent``, with the gateway as its model;
        with ``settings.resume``, it continues that run's conversation."""
        loop = asyncio.get_running_loop()
        settings = self.settings
        spec = parent_tools(settings)
        env = self.command_environment()
        try:
            policy = policy_for(BUILTIN_AGENTS["general-purpose"], settings)  # a writing child's
        except SandboxRefused:  # no Landlock: said once, as for the children
            policy = SandboxPolicy(
                local_fetch_hosts=settings.local_fetch_hosts,
                allowed_domains=settings.allowed_domains,
            )
        temp = tempfile.mkdtemp(prefix="isoagent-parent-")  # its commands' TMPDIR
        env["TMPDIR"] = temp
        prefix: tuple[str, ...] = ()
        hands = None
        if policy.mode != "off":  # its commands and file tools get a writing child's sandbox
            where = (str(settings.workdir), temp, [str(p) for p in settings.add_dirs])
            confinement = Confinement(policy, settings.limits, *where)
            prefix = command_prefix(confinement)
            log = self.run.opener(self.run.path / HANDS_LOG)
            offline = msgspec.structs.replace(policy, network=False, proxy="")  # files only
            hands = Hands(
                msgspec.structs.replace(confinement, policy=offline),
                child_environment(temp), log, self.fork_server, loop,
            )  # fmt: skip
        # its own WebFetch runs in this process: it checks what the proxy would check
        fetching = msgspec.structs.replace(
            policy, proxy="", network=settings.child_network != "off"
        )
        ctx = ToolContext(
            settings.workdir, settings.limits, env=env, sandbox=fetching,
            bash_allow=spec.bash_allow, bash_deny=spec.bash_deny, cancelled=self.stop_parent,
            add_dirs=settings.add_dirs, command_prefix=prefix,
        )  # fmt: skip
        tools = handed(make_tools([name for name in spec.tools if name != TASK_TOOL], ctx), hands)
        try:  # its MCP servers start as its commands do (an interrupt ends them by their tag)
            mcp, mcp_sessions = await asyncio.to_thread(parent_mcp_tools, settings, ctx)
        except asyncio.CancelledError:
            ctx.end_commands()
            shutil.rmtree(temp, ignore_errors=True)
            raise
        allowed = allowed_spec(settings.allowed_tools)
        ask = self.ask
        if ask is not None and self.hooks is not None:
            ask = noticed(ask, self.hooks.notify)
        tools = asking_tools([*tools, *mcp], ask, allowed, settings.permission_mode)
        task_tool = None
        if TASK_TOOL in spec.tools:
            task_tool = TaskTool(ctx, self.supervisor, loop, settings.agents)
            tools += [task_tool, SendMessageTool(ctx, task_tool)]
        if settings.json_schema is not None:
            self.structured = StructuredOutputTool(ctx, settings.json_schema)
            tools.append(self.structured)
        emit = self.events
        history = conversation_to_resume(settings)
        for message in history:  # run.jsonl holds the whole conversation, for a later resume
            self.log(MessageAdded(message.role, message.content, 0))

        def thread_safe(event: Event) -> None:
            loop.call_soon_threadsafe(emit, event)

        recorder = ConversationRecorder(thread_safe, seen=len(history))
        hooks = None
        if self.hooks is not None:
            hooks = self.hooks.for_parent((t.name for t in tools), can_ask=self.ask is not None)
        self._bridge = bridge = GatewayBridge(self.gateway, loop, recorder)
        if self.stop_parent.is_set():
            bridge.abort()
        agent = Agent(
            bridge,
            tools,
            system=parent_prompt(
                settings,
                PARENT_PROMPT.format(workdir=settings.workdir) + add_dirs_note(settings.add_dirs),
            ),
            model_name=settings.model,
            agent_name="parent",
            max_turns=settings.limits.max_turns,
            max_tokens=settings.limits.max_tokens,
            output_cap=settings.limits.output_cap,
            max_parallel=settings.max_parallel,
            is_cancelled=ctx.cancelled.is_set,
            call_options=settings.call_options,
            notices=task_tool.background if task_tool is not None else None,
            spans=self.trace.recorder() if self.trace is not None else None,
            hooks=hooks,
        )
        self.parent_running = True
        try:
            if self.hooks is not None:  # UserPromptSubmit
                submitted, refused = await run_in_thread(self.hooks.prompt, prompt)
                if submitted is None:
                    return Result("", "error", 0, 0, Usage(), 0.0, error=refused)
                prompt = submitted
            result = await run_in_thread(agent.run, prompt, history)
            for message in agent.messages[recorder.seen :]:  # its last tool results
                emit(MessageAdded(message.role, message.content, result.turns))
            if agent.stopped is not None:  # a hook said continue: false
                self.terminal_reason = "hook_stopped"
            if result.status == "cancelled" and bridge.aborted:  # the SDK's interrupt
                last = agent.messages[-1]  # the prompt: no answer had begun (nor a tool run)
                unasked = last.role == "user" and not any(
                    isinstance(b, ToolResultBlock) for b in last.content
                )
                self._close_interrupted(agent.messages, result.turns, bridge.cut or unasked)
            if self.structured is not None:
                if result.status == "ok" and self.structured.value is None:  # once more
                    result = await run_in_thread(agent.run, ENFORCE_STRUCTURED, agent.messages)
                result = self.structured.result(result)
            if self._ending is not None:  # an interrupt's: the children's ends come first
                await self._ending
            return result
        except asyncio.CancelledError:
            ctx.cancelled.set()
            raise
        finally:
            self.parent_running = False
            ctx.end_commands()  # and whatever the parent's own commands left running
            if mcp_sessions is not None:  # their servers among them: no wait for their end
                mcp_sessions.close()
            if hands is not None:
                hands.close()
            shutil.rmtree(temp, ignore_errors=True)
