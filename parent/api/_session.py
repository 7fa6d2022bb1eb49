"""``isoagent.Session``: several tasks over one fork server, gateway and run folder; the
public face of ``parent/session.py``'s ``Session``, which it opens without signal handlers."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import time
from contextvars import ContextVar
from pathlib import Path
from types import TracebackType
from typing import Any

from isoagent._calls import Result, check_prompt, options_with
from isoagent.errors import AuthenticationError, IsoagentError, OptionError, RunInterruptedError
from isoagent.parent import session as core
from isoagent.parent.options import Options, settings_for
from isoagent.parent.records.costs import Costs
from isoagent.parent.records.events import ChildFinished, Event, Sink
from isoagent.parent.records.terminal_text import notices
from isoagent.parent.settings import Settings
from isoagent.protocol import Result as AgentResult


class Session:
    """Tasks that share one run: its fork server, model gateway (concurrency cap, budget, rate
    limits) and run folder. ``asyncio.gather`` several ``task`` calls to run them at once,
    up to ``max_parallel`` children::

        async with isoagent.Session(isoagent.Options(model="haiku")) as session:
            one, two = await asyncio.gather(session.task("a"), session.task("b"))

    Leaving it ends every child still running (also when the task that opened it is
    cancelled, as Ctrl-C does under ``asyncio.run``) and writes the run's last record.
    """

    def __init__(self, options: Options | None = None, **kw: Any) -> None:
        self.options = options_with(options, kw)
        self._core: core.Session | None = None
        self._opened: Any = None  # Session.open's context manager, while open
        self._results: list[AgentResult] = []
        self._settings: Settings | None = None  # made from ``options`` when None

    async def __aenter__(self) -> Session:
        settings = self._settings or _settings(self.options)
        self._costs = Costs(settings.model)  # priced at the run's rate (its RunStarted)
        sinks: list[Sink] = [self._costs, _record_finished]
        self._notices = notices.set(notice)  # a library writes nothing to stderr
        self._opened = core.Session.open(settings, sinks=sinks, signals=False)
        try:
            self._core = await self._opened.__aenter__()
        except core.SessionError as exc:
            notices.reset(self._notices)
            raise IsoagentError(str(exc)) from None
        self._core.waits.say = notice
        self._started = time.monotonic()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        session = self._session
        if session.final is None:
            session.finish(self._summary(session))
        try:
            return bool(await self._opened.__aexit__(kind, exc, tb))
        except core.Interrupted as interrupted:
            raise RunInterruptedError(str(interrupted)) from None
        finally:
            with contextlib.suppress(ValueError):  # left in another context than entered
                notices.reset(self._notices)

    @property
    def run_dir(self) -> Path:
        """The run folder: each task's transcript and the run's ``run.jsonl``."""
        return self._session.run.path

    @property
    def session_id(self) -> str:
        """The run's session (a UUID, or ``Options.session_id``): ``resume=`` it."""
        return self._session.session_id

    def interrupt(self) -> None:
        """End every running child now, from any thread (the claude-agent-sdk's
        ``interrupt``): each of their tasks ends ``cancelled`` (``RunInterruptedError``)."""
        self._session.interrupt()

    async def task(self, prompt: str, *, agent: str = "general-purpose") -> Result:
        """One subagent of type ``agent`` on ``prompt``, in its own process; its ``Result``,
        or its failure raised (``IsoagentError``)."""
        return (await self.task_result(prompt, agent=agent)).raise_for_status()

    async def task_result(self, prompt: str, *, agent: str = "general-purpose") -> Result:
        """``task`` whatever the end: a failure is the ``Result``'s ``status`` and
        ``exception``, not raised (an option that cannot be used still is)."""
        from isoagent.parent.batch.input import unknown_agent
        from isoagent.parent.children.child_run import ChildRequest, describe

        session = self._session
        spec = session.settings.agents.get(agent)
        if spec is None:
            raise OptionError(unknown_agent(agent, session.settings.agents))
        request = ChildRequest(describe(check_prompt(prompt)), prompt, spec)
        mine: list[ChildFinished] = []  # its record, as the child's run emits it
        token = _finished_here.set(mine)
        try:
            finished = await session.supervisor.run(request)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not mine or (current is not None and current.cancelling()):
                raise  # this call was cancelled, not its child ended by ``interrupt``
            finished = mine[-1]
        finally:
            _finished_here.reset(token)
        self._results.append(finished.result)
        cost = self._costs.usd.get(finished.child, 0.0)
        return self._result(
            finished.result,
            transcript=session.run.path / Path(finished.transcript).name,
            agent=finished.child,
            children=[finished],
            cost_usd=cost,
            children_cost_usd={finished.child: cost},
        )

    async def run_parent(self, prompt: str) -> Result:
        """The parent agent on ``prompt``: the run's one answer (``isoagent.run``)."""
        session = self._session
        result = await session.run_parent(check_prompt(prompt))
        final = session.finish(result)
        return self._result(
            result,
            transcript=session.run.path / "run.jsonl",
            agent="",
            children=list(final.children),
            structured_output=final.structured_output,
            cost_usd=self._costs.total,
            children_cost_usd={child: usd for child, usd in self._costs.usd.items() if child},
        )

    @property
    def _session(self) -> core.Session:
        if self._core is None:
            raise IsoagentError("the session is not open: use it in `async with`")
        return self._core

    def _result(self, result: AgentResult, *, agent: str, **more: Any) -> Result:
        failure = self._session.gateway.failures.get(agent)
        return Result(
            result=result.summary,
            status=result.status,
            usage=result.usage,
            session_id=self.session_id,
            run_dir=self.run_dir,
            error=result.error,
            turns=result.turns,
            tool_calls=result.tool_calls,
            duration=result.duration,
            api_error=failure if result.status == "error" else None,
            **more,
        )

    def _summary(self, session: core.Session) -> AgentResult:
        """The run's last record: its one task's result, or how many of its tasks ended ok."""
        if len(self._results) == 1:
            return self._results[0]
        failed = sum(r.status != "ok" for r in self._results)
        total = len(self._results)
        return AgentResult(
            summary=f"{total - failed} of {total} tasks ok",
            status="error" if failed else "ok",
            turns=sum(r.turns for r in self._results),
            tool_calls=sum(r.tool_calls for r in self._results),
            usage=session.gateway.usage,
            duration=round(time.monotonic() - self._started, 3),
            error=f"{failed} of {total} tasks not ok" if failed else "",
        )


logger = logging.getLogger("isoagent")


def notice(line: str) -> None:
    """What the CLI says on stderr, from the Python API: to the ``isoagent`` logger (shown
    once the caller asks, ``logging.basicConfig(level=logging.INFO)``)."""
    logger.info("%s", line.removeprefix("isoagent: "))


class NoticeStream(io.StringIO):
    """A stream whose lines are ``notice``s (a batch's progress lines, from the API)."""

    def write(self, text: str) -> int:
        for line in text.replace("\r", "\n").splitlines():
            if line := line.replace("\x1b[K", "").strip():
                notice(line)
        return len(text)


# the ``ChildFinished`` of the child a ``task_result`` call started: the child's run is a
# task of its own, begun in (a copy of) that call's context, and emits it from there
_finished_here: ContextVar[list[ChildFinished]] = ContextVar("finished_here")


def _record_finished(event: Event) -> None:
    if isinstance(event, ChildFinished):
        with contextlib.suppress(LookupError):
            _finished_here.get().append(event)


def _settings(options: Options) -> Settings:
    """``settings_for`` the options, and credentials to call the model with."""
    from isoagent.parent.model.sdk import MissingCredentials, check_credentials

    try:
        settings = settings_for(options)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    if settings.replay is None:
        try:
            check_credentials()
        except MissingCredentials as exc:
            raise AuthenticationError(str(exc)) from None
    return settings
