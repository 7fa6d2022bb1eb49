"""The session's children: their slots, their starts and ends, and their delegations.

Each child is ``python -m isoagent.child`` (or forked, ready, by the session's fork
server: ``parent/children/forkserver.py``) in a session of its own, with an environment
built from an allow-list (no credentials). The supervisor runs at most
``--max-parallel`` of them at once (a child's child in its ancestor's slot), each as a
``ChildRun`` (``child_run.py``: one child from its spawn to its Result), ends them when
the run is interrupted, and checks a child's ``Agent`` call against the run's limits before
its child's child starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import TYPE_CHECKING

from isoagent.parent.children.child_hooks import ChildHooks
from isoagent.parent.children.child_run import ChildRequest, ChildRun, child_id
from isoagent.parent.children.forkserver import ForkServer
from isoagent.parent.children.launchers import ChildFailed, Launchers
from isoagent.parent.children.planted import (
    FOLDER_LIMIT,
    INLINE_FOLDERS,
    PlantedNames,
    may_write,
    say,
)
from isoagent.parent.children.sandbox_policy import PROTECTED
from isoagent.parent.model.gateway import Gateway
from isoagent.parent.records.events import ChildFinished, Sink
from isoagent.parent.records.run_folder import RunFolder
from isoagent.parent.records.terminal_text import warn
from isoagent.parent.settings import Settings
from isoagent.protocol import TaskCall, TaskReply

if TYPE_CHECKING:
    from isoagent.parent.telemetry.run_trace import RunTrace


# children that children may start in one run, in all (--max-depth 2 or more)
NESTED_CHILDREN = 64


def ended_well(finished: ChildFinished) -> bool:
    """Whether its summary is an answer (its turns may have run out), not a failure's."""
    return finished.result.status in ("ok", "max_turns")


def report(finished: ChildFinished) -> str:
    """The child's summary plus one line of facts: all the parent's context gets."""
    result = finished.result
    facts = (
        f"{result.turns} turns, {result.tool_calls} tool calls, "
        f"{result.usage.total} tokens, {result.duration:.1f} s; transcript {finished.transcript}; "
        f"agentId {finished.child}"
    )
    if result.status == "ok":
        return f"{result.summary or '(no summary)'}\n\n[subagent {finished.agent} done: {facts}]"
    head = f"[subagent {finished.agent} {result.status}: {result.error}; {facts}]"
    if result.summary:
        return f"{result.summary}\n\n{head}"
    return head


class Supervisor:
    """Runs children for one session, at most ``settings.max_parallel`` at once."""

    def __init__(
        self,
        settings: Settings,
        *,
        gateway: Gateway,
        run: RunFolder,
        sink: Sink,
        fork_server: ForkServer | None = None,
    ) -> None:
        self.settings = settings
        self.gateway = gateway
        self.run_folder = run
        self.sink = sink
        self._slots = asyncio.Semaphore(settings.max_parallel)
        self._numbers = itertools.count(1)
        self.finished: list[ChildFinished] = []
        self.launchers = Launchers(settings, fork_server, run.run_id)
        self._running: set[asyncio.Task[ChildFinished]] = set()
        self._loop = asyncio.get_running_loop()
        self.live: dict[str, ChildRun] = {}  # the children running, by id
        # those in a slot, starting or running, by id: the run's budgets' sharers (a child
        # still starting, seconds under load, would find its sibling had spent its share)
        self.sharing: set[str] = set()
        # every child asked for and not ended, by id: one not live waits for a slot or starts
        self._asked: dict[str, asyncio.Task[ChildFinished]] = {}
        self.nested = 0  # children that children started
        self.hooks: ChildHooks | None = None  # the session's, asked about its children
        self.planted = None
        self._planted_lock = asyncio.Lock()
        # the repositories and .claude folders below the workspace's top, read-only to
        # writing children: found once, before the first of them starts
        self.nested_protected: tuple[str, ...] = ()
        self.trace: RunTrace | None = None  # the run's telemetry, when on (the session's)
        if settings.sandbox != "off":
            roots = (settings.workdir, *settings.add_dirs)
            self.planted = PlantedNames(roots, run)

    async def run(self, request: ChildRequest) -> ChildFinished:
        """Run one child to its end; a failure becomes a Result, never an exception.
        Cancelling the caller ends the child, and returns once it is ended and recorded."""
        return await self.start(request)[1]

    def start(self, request: ChildRequest) -> tuple[str, asyncio.Task[ChildFinished]]:
        """Start one child without waiting for it (a background one): its id at once, and
        the task that runs it to its end, as ``run`` does; cancelling that task ends it."""
        number = next(self._numbers)
        child = child_id(number)
        run = asyncio.ensure_future(self._run(request, number))
        self._running.add(run)
        self._asked[child] = run
        run.add_done_callback(self._running.discard)
        run.add_done_callback(lambda _: self._asked.pop(child, None))
        return child, run

    @property
    def running(self) -> int:
        """Children asked for and not yet ended."""
        return len(self._running)

    async def let_answered_finish(self, why: str, grace: float) -> None:
        """End every running child but those whose last model answer is in (it asked for
        no tool: their Result is all that is left, and it was paid for), and give those up
        to ``grace`` seconds to send it, so that their task is not run (and paid) again."""
        deadline = self._loop.time() + grace
        for run in list(self.live.values()):
            if not run.calls.answered:
                run.end(ChildFailed(why, "cancelled"))
        while (
            any(run.calls.answered for run in self.live.values()) and self._loop.time() < deadline
        ):
            await asyncio.sleep(0.02)

    async def end_all(self) -> None:
        """End every child still running and wait until each is ended and recorded. A
        session's children may run in tasks of their own (those of the parent's ``Agent``
        tool do), which no cancellation of the session's own task reaches."""
        running = list(self._running)
        for run in running:
            run.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    def over_budget(self, pid: int, why: str) -> None:
        """From any thread (the egress proxy's): end the child ``pid`` of this machine,
        which broke a budget of the parent's; ``why`` becomes its error."""
        self._loop.call_soon_threadsafe(self._end_pid, pid, ChildFailed(why, "error"))

    def _end_pid(self, pid: int, failure: ChildFailed) -> None:
        for run in self.live.values():
            if run.pid == pid:
                run.end(failure)

    async def delegate(self, asking: ChildRun, call: TaskCall) -> TaskReply:
        """A child's ``Agent`` call, one its Task grants (``child_calls.py`` checked): a
        request, checked against the run's limits (children in all, budget) before its
        child runs, as a process of this parent's."""
        agent = self.settings.agents[call.subagent_type]
        total = self.settings.max_tokens_total
        if self.nested >= NESTED_CHILDREN:
            refusal = f"this run's children have started {NESTED_CHILDREN} children, its limit"
        elif total and self.gateway.usage.total >= total:
            refusal = f"the run's token budget ({total}) is used up"
        else:
            self.nested += 1
            depth = asking.request.depth + 1
            request = ChildRequest(call.description, call.prompt, agent, depth, asked_by=asking.id)
            finished = await self.run(request)
            return TaskReply(call.id, report(finished), not ended_well(finished))
        return TaskReply(call.id, refusal, is_error=True)

    def stop(self, child: str) -> bool:
        """End child ``child`` alone (the SDK's ``stop_task``), its status cancelled: the
        ``Agent`` call that started it returns that, and the parent goes on. False: no
        such child is running. One that has not started yet (a background child waiting for
        a slot) never starts."""
        run, asked = self.live.get(child), self._asked.get(child)
        if run is not None:
            run.end(ChildFailed("was stopped (stop_task)", "cancelled"))
        elif asked is not None:
            asked.cancel()
        return asked is not None

    async def _run(self, request: ChildRequest, number: int) -> ChildFinished:
        writing = self.planted is not None and may_write(request.agent, self.settings)
        # a child's child runs in the slot of its ancestor, which waits for it
        async with self._slots if request.depth == 1 else contextlib.nullcontext():
            child = child_id(number)
            self.sharing.add(child)
            try:
                if writing:
                    await self._look_for_planted()
                finished = await self.launchers.run(
                    number,
                    lambda launcher, attempt: ChildRun(self, request, number, launcher, attempt),
                )
            finally:
                self.sharing.discard(child)
        self.finished.append(finished)
        if writing:
            await self._move_planted(finished.child)
        return finished

    async def _look_for_planted(self) -> None:
        """Before the first writing child starts: what protected names there are."""
        assert self.planted is not None
        async with self._planted_lock:
            if self.planted.taken:
                return
            if not self.planted.snapshot(INLINE_FOLDERS):
                await asyncio.to_thread(self.planted.snapshot)
            kept = [n for n in PROTECTED if n != ".isoagent"]
            if self.settings.writable_git:
                kept.remove(".git")
            self.nested_protected = self.planted.nested(kept)
            if self.planted.partial:
                warn(
                    f"warning: more than {FOLDER_LIMIT} folders under the workspace: a .git "
                    "or .claude a child creates past them is not looked for"
                )

    async def _move_planted(self, child: str) -> None:
        assert self.planted is not None
        async with self._planted_lock:
            planted = self.planted
            moved = (
                planted.take(child)
                if planted.small
                else await asyncio.to_thread(planted.take, child)
            )
        say(moved, self.run_folder)

    async def close(self) -> None:
        """End what outlives single children: host servers, ssh control masters."""
        await self.launchers.close()
