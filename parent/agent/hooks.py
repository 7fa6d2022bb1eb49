"""Claude Code's hooks, run in the parent for its own steps and for every child's.

Two kinds, as Claude Code has them: the commands of a settings file's ``hooks``
(``--settings``: run with ``sh -c``, the hook's input as JSON on stdin; exit 2 blocks with
stderr as the reason, JSON on stdout decides) and the claude-agent-sdk's callbacks
(registered at ``initialize`` by callback id, each asked with a ``hook_callback`` control
request). Both run here, in the parent: a settings command is the user's own, run as the
user (unsandboxed, as in Claude Code, without the API key); a child asks about its steps
with a ``HookCall`` frame and waits for the ``HookReply`` (``children/child_calls.py``), only for
the steps its Task's ``HookPlan`` names.

Events: PreToolUse, PostToolUse, PostToolUseFailure (the parent's and every child's tool
calls, ``agent_id``/``agent_type`` for a child's), SubagentStart, SubagentStop, Stop,
UserPromptSubmit and Notification (when the parent asks the SDK's ``can_use_tool``, as
Claude Code notifies its user that it waits for a permission). Tools, their names and
inputs, are Claude Code's. Any other event, or a hook that is not a command, is refused by
name: a hook meant to guard something must not be dropped.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from isoagent.child.agent.builtin_agents import TASK_ALIASES, TASK_TOOL
from isoagent.child.agent.loop import Hooks as LoopHooks
from isoagent.child.identity import allowed_environment
from isoagent.parent.children.child_hooks import Subagent
from isoagent.parent.records.terminal_text import warn
from isoagent.protocol import HookCall, HookPlan, HookReply

EVENTS = frozenset(
    {"PreToolUse", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "Stop",
     "SubagentStart", "SubagentStop", "Notification"}
)  # fmt: skip
_TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"})
_AGENT_EVENTS = frozenset({"SubagentStart", "SubagentStop"})  # matched on the agent type
_DECISIONS = frozenset({"allow", "deny", "ask", "defer"})
DEFAULT_TIMEOUT = 60.0  # seconds, as in Claude Code

# (a control request for the SDK, seconds to wait) -> its response; None: none came
AskSdk = Callable[[dict[str, Any], float], "dict[str, Any] | None"]


class UnsupportedHook(Exception):
    """A hook isoagent cannot run; the message names it and says why."""


@dataclass(frozen=True)
class Hook:
    command: str = ""  # a settings file's: run with sh -c
    callback: str = ""  # the SDK's: its callback id
    timeout: float = DEFAULT_TIMEOUT
    blocks_on_failure: bool = False  # the SDK's on_failure="block"

    @property
    def name(self) -> str:
        return f"`{self.command}`" if self.command else f"SDK callback {self.callback}"


@dataclass(frozen=True)
class Matcher:
    pattern: str  # a tool's (an agent type's) name, names joined by |, or a regular expression
    hooks: tuple[Hook, ...]

    def matches(self, name: str) -> bool:
        """As Claude Code matches: everything for "" and "*", exact names, else a regex."""
        names = TASK_ALIASES if name == TASK_TOOL else (name,)  # Agent is Task too
        if self.pattern in ("", "*"):
            return True
        if re.fullmatch(r"[\w|]+", self.pattern):
            return any(n in self.pattern.split("|") for n in names)
        return any(re.search(self.pattern, n) for n in names)


@dataclass
class Verdict:
    """What the hooks of one event decided together (the strictest decision wins)."""

    permission: str = ""  # PreToolUse: allow, ask, deny (or "": no opinion)
    block: bool = False  # decision: block (exit 2)
    reason: str = ""
    input: dict[str, Any] | None = None  # updatedInput
    output: str | None = None  # updatedToolOutput
    context: list[str] = field(default_factory=list)  # additionalContext
    stop: str | None = None  # continue: false, and its stopReason

    def take(self, out: Mapping[str, Any], event: str = "") -> str:
        """Add one hook's JSON output for ``event``; what is wrong with it ("": nothing).
        An output whose ``hookSpecificOutput`` names another event is taken not at all."""
        specific = out.get("hookSpecificOutput")
        specific = specific if isinstance(specific, dict) else {}
        named = specific.get("hookEventName")
        if event and named is not None and named != event:
            return f"its hookSpecificOutput is for {named}, not {event}"
        if out.get("continue") is False and self.stop is None:
            self.stop = str(out.get("stopReason") or "")
        permission = specific.get("permissionDecision")
        if out.get("decision") in ("block", "approve"):
            permission = permission or {"block": "deny", "approve": "allow"}[out["decision"]]
            self.block = self.block or out["decision"] == "block"
        if permission is not None and permission not in _DECISIONS:
            return f"permissionDecision {permission!r} is not one of {sorted(_DECISIONS)}"
        order = ["", "defer", "allow", "ask", "deny"]
        reason = specific.get("permissionDecisionReason") or out.get("reason")
        if permission and order.index(permission) > order.index(self.permission):
            self.permission, self.reason = permission, str(reason or "")
        elif self.block and not self.reason and reason:
            self.reason = str(reason)
        if isinstance(specific.get("updatedInput"), dict):
            self.input = specific["updatedInput"]
        updated = specific.get("updatedToolOutput", specific.get("updatedMCPToolOutput"))
        if updated is not None:
            self.output = updated if isinstance(updated, str) else _output_text(updated)
        if specific.get("additionalContext"):
            self.context.append(str(specific["additionalContext"]))
        return ""


def _output_text(output: Any) -> str:
    """A tool output given as Claude Code's Bash shape (stdout, stderr) or any JSON."""
    if isinstance(output, dict) and "stdout" in output:
        return "\n".join(filter(None, (str(output["stdout"]), str(output.get("stderr") or ""))))
    return json.dumps(output)


@dataclass(frozen=True)
class Hooks:
    """The hooks a session runs, by event: a settings file's commands, the SDK's callbacks."""

    events: Mapping[str, tuple[Matcher, ...]] = field(default_factory=dict)
    sdk: AskSdk | None = None  # how the SDK's callbacks are asked
    # called before any hook runs: the planted names children made are swept first
    # (planted.PlantedNames.sweep), so a hook's `git status` runs no child's fsmonitor
    before: Callable[[], object] | None = None

    def __bool__(self) -> bool:
        return any(self.events.values())

    @classmethod
    def from_settings(cls, raw: object) -> Hooks:
        """A settings file's ``hooks`` (Claude Code's format); ``ValueError``: its shape is
        wrong, ``UnsupportedHook``: isoagent cannot run one of them."""
        events: dict[str, list[Matcher]] = {}
        for event, where, group in _groups(raw):
            hooks = []
            for hook in _list(group.get("hooks"), f"{where}.hooks"):
                if not isinstance(hook, dict) or not isinstance(hook.get("command", ""), str):
                    raise ValueError(f"{where}.hooks must hold objects with a command")
                if hook.get("type") != "command":
                    raise UnsupportedHook(
                        f"'{where}': a {hook.get('type')!r} hook: isoagent runs command hooks"
                    )
                hooks.append(Hook(command=hook["command"], timeout=_timeout(hook, where)))
            events.setdefault(event, []).append(Matcher(_pattern(group, where), tuple(hooks)))
        return cls({event: tuple(matchers) for event, matchers in events.items()})

    def with_sdk(self, registered: object, sdk: AskSdk) -> Hooks:
        """These hooks and the SDK's callbacks of an ``initialize`` request."""
        events = {event: list(matchers) for event, matchers in self.events.items()}
        for event, where, group in _groups(registered):
            ids = _list(group.get("hookCallbackIds"), f"{where}.hookCallbackIds")
            blocks = group.get("onFailure") not in (None, "continue")
            timeout = _timeout(group, where)
            hooks = tuple(
                Hook(callback=str(c), timeout=timeout, blocks_on_failure=blocks) for c in ids
            )
            events.setdefault(event, []).append(Matcher(_pattern(group, where), hooks))
        return Hooks({event: tuple(matchers) for event, matchers in events.items()}, sdk)

    def matching(self, event: str, name: str = "") -> list[Hook]:
        """The hooks to run for ``event`` on ``name`` (a tool's or an agent type's)."""
        matched = event not in _TOOL_EVENTS | _AGENT_EVENTS  # the others match everything
        return [
            hook
            for matcher in self.events.get(event, ())
            if matched or matcher.matches(name)
            for hook in matcher.hooks
        ]

    def run(self, event: str, payload: dict[str, Any], name: str = "") -> Verdict:
        """Run every hook of ``event`` that matches ``name``, in order; their verdict."""
        verdict = Verdict()
        hooks = self.matching(event, name)
        if hooks and self.before is not None:
            self.before()
        for hook in hooks:
            out = self._command(hook, event, payload) if hook.command else self._sdk(hook, payload)
            if out is None:
                continue
            if wrong := verdict.take(out, event):  # a guard that answers wrong fails closed
                verdict.take(_failed(hook, event, wrong, closed=event == "PreToolUse"))
        return verdict

    def _command(self, hook: Hook, event: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        # the allow-list every process the parent starts gets: no key, no token
        env = {**allowed_environment(), "CLAUDE_PROJECT_DIR": payload["cwd"]}
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", hook.command], input=json.dumps(payload).encode(),
                capture_output=True, timeout=hook.timeout, cwd=payload["cwd"], env=env,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return _failed(hook, event, f"no answer within {hook.timeout:g} s")
        except OSError as exc:
            return _failed(hook, event, str(exc.strerror or exc))
        stdout = done.stdout.decode(errors="replace").strip()
        stderr = done.stderr.decode(errors="replace").strip()
        if done.returncode == 2:  # a blocking error: stderr is the reason
            return {"decision": "block", "reason": stderr}
        if done.returncode != 0:
            lines = stderr.splitlines()
            return _failed(hook, event, f"exit {done.returncode}: {lines[-1] if lines else ''}")
        if stdout.startswith("{"):
            try:
                out = json.loads(stdout)
            except ValueError:
                return _failed(hook, event, "its output is not valid JSON")
            return out if isinstance(out, dict) else {}
        if event == "UserPromptSubmit" and stdout:  # plain output is context, there only
            return {"hookSpecificOutput": {"additionalContext": stdout}}
        return {}

    def _sdk(self, hook: Hook, payload: dict[str, Any]) -> dict[str, Any] | None:
        assert self.sdk is not None  # an SDK's callbacks come with the way to ask them
        event = payload["hook_event_name"]
        request = {
            "subtype": "hook_callback",
            "callback_id": hook.callback,
            "input": payload,
            "tool_use_id": payload.get("tool_use_id"),
        }
        response = self.sdk(request, hook.timeout)
        if response is None:
            return _failed(hook, event, f"no answer within {hook.timeout:g} s")
        if response.get("subtype") != "success":
            return _failed(hook, event, str(response.get("error") or "it failed"))
        out = response.get("response")
        return out if isinstance(out, dict) else {}


def _failed(hook: Hook, event: str, why: str, closed: bool = False) -> dict[str, Any]:
    """A hook that failed, said on stderr, as its output: nothing, or a block where the
    SDK set it to (``on_failure="block"``) or the failure is ``closed`` (a PreToolUse hook's
    answer that is wrong: its call does not run, as in Claude Code)."""
    warn(f"warning: {event} hook {hook.name} failed: {why}")
    if not (closed or hook.blocks_on_failure):
        return {}
    return {"decision": "block", "reason": f"{event} hook {hook.name} failed: {why}"}


def _groups(raw: object) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """The matcher groups of a ``hooks`` object (a settings file's, an ``initialize``
    request's), each with its event and where it is, for what is wrong with it."""
    if not isinstance(raw, dict):
        raise ValueError("hooks must be an object")
    for event in raw:
        if event not in EVENTS:
            raise UnsupportedHook(
                f"'hooks.{event}': isoagent runs hooks for {', '.join(sorted(EVENTS))}"
            )
    for event, groups in raw.items():
        for i, group in enumerate(_list(groups, f"hooks.{event}")):
            where = f"hooks.{event}[{i}]"
            if not isinstance(group, dict):
                raise ValueError(f"{where} must be an object")
            yield event, where, group


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list")
    return value


def _pattern(group: dict[str, Any], where: str) -> str:
    pattern = group.get("matcher") or ""
    if not isinstance(pattern, str):
        raise ValueError(f"{where}.matcher must be a string")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{where}.matcher: {exc}") from None
    return pattern


def _timeout(hook: dict[str, Any], where: str) -> float:
    timeout = hook.get("timeout")
    if timeout is None:
        return DEFAULT_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"{where}.timeout must be a positive number of seconds")
    return float(timeout)


@dataclass(frozen=True)
class SessionHooks:
    """A session's hooks and what every hook input of the session carries."""

    hooks: Hooks
    session_id: str
    transcript_path: str
    cwd: str
    permission_mode: str

    def _input(self, event: str, agent: Subagent | None, **fields: Any) -> dict[str, Any]:
        payload = {
            "session_id": self.session_id,
            "transcript_path": self.transcript_path,
            "cwd": self.cwd,
            "permission_mode": self.permission_mode,
            "hook_event_name": event,
        }
        if agent is not None:
            payload.update(agent_id=agent.id, agent_type=agent.type)
        return {**payload, **fields}

    def plan(self, tools: Iterable[str], agent: Subagent | None = None) -> HookPlan:
        """What an agent with ``tools`` asks about: the tools some hook's matcher names
        ("*": every tool, for MCP servers granted whole, whose tools are not known yet) and
        its end, if a Stop (SubagentStop) hook matches it."""
        hooks = self.hooks
        names = list(tools)

        def asked(*events: str) -> tuple[str, ...]:
            if any(hooks.events.get(e) for e in events) and any(
                n.startswith("mcp__") and n.count("__") == 1 for n in names
            ):
                return ("*",)
            return tuple(n for n in names if any(hooks.matching(e, n) for e in events))

        stop = hooks.matching("SubagentStop", agent.type) if agent else hooks.matching("Stop")
        return HookPlan(asked("PreToolUse"), asked("PostToolUse", "PostToolUseFailure"), bool(stop))

    def for_parent(self, tools: Iterable[str], can_ask: bool) -> LoopHooks:
        """The parent agent's hooks (``can_ask``: the SDK's can_use_tool is there)."""
        return LoopHooks(self.plan(tools), lambda call: self.answer(call, None, can_ask))

    def answer(self, call: HookCall, agent: Subagent | None, can_ask: bool = False) -> HookReply:
        """Run the hooks of ``call``, an agent's step (a child's: ``agent``)."""
        name = call.tool
        tool = {"tool_name": name, "tool_input": call.input, "tool_use_id": call.tool_use_id}
        if call.event == "PreToolUse":
            verdict = self.hooks.run("PreToolUse", self._input("PreToolUse", agent, **tool), name)
            context = "\n".join(verdict.context)
            nobody = verdict.permission == "ask" and not can_ask
            if verdict.stop is None and (verdict.block or verdict.permission == "deny" or nobody):
                why = verdict.reason or ("it asks for a yes, and nobody can be asked" * nobody)
                denial = f"PreToolUse:{name} hook denied this tool call: {why or 'no reason'}"
                return HookReply(call.id, block=True, reason=denial, context=context)
            return HookReply(call.id, input=verdict.input, context=context, stop=verdict.stop)
        if call.event == "PostToolUse":
            event = "PostToolUseFailure" if call.is_error else "PostToolUse"
            result = {"error": call.output} if call.is_error else {"tool_response": call.output}
            verdict = self.hooks.run(event, self._input(event, agent, **tool, **result), name)
            reason = f"{event}:{name} hook: {verdict.reason}" if verdict.block else ""
            return HookReply(
                call.id, block=verdict.block, reason=reason, output=verdict.output,
                context="\n".join(verdict.context), stop=verdict.stop,
            )  # fmt: skip
        event = "Stop" if agent is None else "SubagentStop"
        fields: dict[str, Any] = {
            "stop_hook_active": call.again,
            "last_assistant_message": call.output,
        }
        if agent is not None:
            fields["agent_transcript_path"] = agent.transcript
        verdict = self.hooks.run(
            event, self._input(event, agent, **fields), agent.type if agent else ""
        )
        return HookReply(call.id, block=verdict.block, reason=verdict.reason, stop=verdict.stop)

    def prompt(self, prompt: str) -> tuple[str | None, str]:
        """UserPromptSubmit: the prompt to run (with the hooks' context), or None and why not."""
        verdict = self.hooks.run(
            "UserPromptSubmit", self._input("UserPromptSubmit", None, prompt=prompt)
        )
        if verdict.stop is not None or verdict.block:
            why = verdict.stop or verdict.reason or "no reason"
            return None, f"the prompt was blocked by a UserPromptSubmit hook: {why}"
        return "\n\n".join([prompt, *verdict.context]), ""

    def notify(self, message: str, kind: str) -> None:
        """Notification: what the session tells its user (``kind``: Claude Code's
        notification_type); the hooks' answers change nothing."""
        fields = {"message": message, "notification_type": kind}
        self.hooks.run("Notification", self._input("Notification", None, **fields))

    def subagent_start(self, agent: Subagent) -> str:
        """SubagentStart: what its hooks add to the child's prompt."""
        payload = self._input("SubagentStart", agent)
        return "\n".join(self.hooks.run("SubagentStart", payload, agent.type).context)
