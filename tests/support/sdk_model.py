"""The model the claude-agent-sdk's own e2e tests and examples expect, scripted for the
in-test server: each prompt they send gets the answers a real model would give (the tool
calls they ask for, then a short answer), so the SDK's programs run unchanged against
isoagent and against the bundled Claude Code alike.

``play`` is the server's handler. It tells a conversation by its first user text (Claude
Code's ``<system-reminder>`` blocks aside) and its stage by the turns so far; a request it
has no script for (Claude Code's side calls: a title, a summary) gets "ok".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tests.support.messages_server import Reply, Request, error_reply, text_reply, tools_reply

_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)
GREETING = "Hi there, lovely to meet you!"
SLOW_TEXT = " ".join(str(n) for n in range(1, 101))
# how long each streamed event of the "slowly" answer waits: long enough that an interrupt
# sent at once always lands mid-answer, short enough that a missed one is a visible delay
SLOW_PACE = 0.25


def _prompt_at(req: Request) -> tuple[int, str]:
    """Where the latest prompt is in the request's messages, and its words: the last text of
    the last user message that is no tool result (Claude Code's reminders and its words
    for an interrupt aside)."""
    for index in range(len(req.messages) - 1, -1, -1):
        message = req.messages[index]
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if message.get("role") != "user" or any(b.get("type") == "tool_result" for b in blocks):
            continue
        texts = [
            _REMINDER.sub("", b.get("text", "")).strip() for b in blocks if b.get("type") == "text"
        ]
        texts = [t for t in texts if t and not t.startswith("[Request interrupted")]
        if texts:
            return index, texts[-1]
    return 0, ""


def prompt_of(req: Request) -> str:
    """The latest prompt's words."""
    return _prompt_at(req)[1]


def _this_turn(req: Request) -> list[dict[str, Any]]:
    """The messages since the latest prompt."""
    return req.messages[_prompt_at(req)[0] + 1 :]


def thinks(req: Request) -> bool:
    """Whether the request asks for thinking (a budget, or adaptive)."""
    thinking = req.body.get("thinking") or {}
    return thinking.get("type") in ("enabled", "adaptive")


def answer(req: Request, text: str, thought: str = "") -> Reply:
    """A final answer, with a thinking block first when the request thinks."""
    reply = text_reply(text)
    if thinks(req):
        thinking = thought or f"The user wants a short answer; {text!r} will do."
        reply.content.insert(0, {"type": "thinking", "thinking": thinking, "signature": "sig"})
    return reply


Call = tuple[str, dict[str, Any]]


def calls(req: Request, *wanted: Call | list[Call]) -> Reply:
    """Tool calls, each the first of its alternatives the model can make: one offered, or
    one Claude Code defers behind its ``ToolSearch`` (fetched first, as a model does).
    None can be made: a short answer."""
    chosen: list[Call] = []
    fetch: list[str] = []
    for alternatives in wanted:
        options = alternatives if isinstance(alternatives, list) else [alternatives]
        call = next((c for c in options if c[0] in req.tool_names or _fetched(req, c[0])), None)
        if call is not None:
            chosen.append(call)
        elif "ToolSearch" in req.tool_names:
            fetch.append(options[0][0])
    if fetch:
        return tools_reply([("ToolSearch", {"query": "select:" + ",".join(fetch)})])
    if not chosen:
        return answer(req, "I cannot do that with the tools I have.")
    return tools_reply(chosen)


def _fetched(req: Request, name: str) -> bool:
    """Whether an earlier ``ToolSearch`` call fetched tool ``name``."""
    return any(
        b.get("name") == "ToolSearch" and name in str(b.get("input", {}).get("query", ""))
        for m in _this_turn(req)
        for b in _blocks(m)
        if b.get("type") == "tool_use"
    )


def _called(req: Request) -> list[str]:
    """The tools called so far (``ToolSearch`` aside)."""
    return [
        str(b.get("name"))
        for m in _this_turn(req)
        for b in _blocks(m)
        if b.get("type") == "tool_use" and b.get("name") != "ToolSearch"
    ]


def _after_tools(req: Request, text: str = "Done.") -> Reply | None:
    """The closing answer once a tool ran (None before)."""
    return answer(req, text) if _called(req) else None


def _run_command(command: str) -> Callable[[Request], Reply]:
    def play(req: Request) -> Reply:
        run = ("Bash", {"command": command, "description": "Run it"})
        return _after_tools(req) or calls(req, run)

    return play


def _structured(
    value: Callable[[Request], dict[str, Any]], *first: Call | list[Call]
) -> Callable[[Request], Reply]:
    """A tool call or none first (``first``), then ``StructuredOutput`` with ``value``."""

    def play(req: Request) -> Reply:
        called = _called(req)
        if "StructuredOutput" in called:
            return answer(req, "Done.")
        if first and not called:
            return calls(req, *first)
        return calls(req, ("StructuredOutput", value(req)))

    return play


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _earlier_results(req: Request) -> str:
    """What the tools called so far answered (``ToolSearch`` aside), as text."""
    names = {b.get("id"): b.get("name") for m in _this_turn(req) for b in _blocks(m)}
    parts = []
    for message in _this_turn(req):
        for block in _blocks(message):
            if block.get("type") != "tool_result":
                continue
            if names.get(block.get("tool_use_id")) == "ToolSearch":
                continue
            content = block.get("content")
            if isinstance(content, list):
                content = "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
            parts.append(str(content or ""))
    return "\n".join(parts)


def _count_lines(req: Request, suffix: str = "") -> int:
    lines = [line.strip() for line in _earlier_results(req).splitlines() if line.strip()]
    return sum(1 for line in lines if line.endswith(suffix) and not line.startswith("("))


def _agent_then_done(req: Request) -> Reply:
    if _called(req):
        return answer(req, "DONE")
    task = {"description": "Greet", "prompt": "say hi", "subagent_type": "greeter",
            "run_in_background": False}  # fmt: skip
    return calls(req, ("Agent", task))


def _greet_then_echo(req: Request) -> Reply:
    called = _called(req)
    if not called:
        return calls(req, ("mcp__test__greet", {"name": "Alice"}))
    if len(called) == 1 and "mcp__test__echo" in req.tool_names:
        return calls(req, ("mcp__test__echo", {"text": "test"}))
    return answer(req, "Greeted Alice; echo is not available to me.")


def _write_file(req: Request) -> Reply:
    match = re.search(r"create the file (\S+) containing exactly the text (\w+)", prompt_of(req))
    assert match is not None
    return _after_tools(req) or calls(req, ("Write", {"file_path": match[1], "content": match[2]}))


# (a piece of the prompt, how the model answers that conversation), first match wins
SCRIPTS: list[tuple[str, Callable[[Request], Reply]]] = [
    ("What is 2 + 2?", lambda req: answer(req, "4")),
    ("What is 2+2?", lambda req: answer(req, "4")),
    ("What is 3+3?", lambda req: answer(req, "6")),
    ("What is 1+1?", lambda req: answer(req, "2")),
    ("Say hello in exactly 3 words", lambda req: answer(req, "Hello there, friend")),
    ("Say hello in one word", lambda req: answer(req, "Hello")),
    ("List available agents", lambda req: answer(req, "There are twenty large test agents.")),
    ("Reply with exactly: ", lambda req: answer(req, prompt_of(req).rsplit(": ", 1)[1])),
    ("Reply with: pong", lambda req: answer(req, "pong")),
    ("Count from 1 to 100 slowly", lambda req: answer(req, SLOW_TEXT)),
    ("Use the Agent tool exactly once with subagent_type 'greeter'", _agent_then_done),
    ("say hi", lambda req: answer(req, GREETING)),
    ("Think of three jokes, then tell one", lambda req: answer(
        req, "Why did the scarecrow win an award? He was outstanding in his field.",
        "Three jokes: the scarecrow, the atom, the skeleton. I will tell the first.")),
    ("Think step by step about what 2 + 2 equals", lambda req: answer(
        req, "2 + 2 = 4", "Two plus two: 2 + 2 is 4, counting up two from 2.")),
    ("Say hello", lambda req: answer(req, "Hello!")),
    ("Run this bash command: echo 'hello'", _run_command("echo 'hello'")),
    ("Run exactly: ", lambda req: _run_command(prompt_of(req).split(": ", 1)[1])(req)),
    ("Run the command: touch ", lambda req: _run_command(prompt_of(req).split(": ", 1)[1])(req)),
    ("Run: echo ", lambda req: _run_command(prompt_of(req).split(": ", 1)[1])(req)),
    ("Call the mcp__test__echo tool", lambda req: _after_tools(req) or calls(
        req, ("mcp__test__echo", {"text": "hello"}))),
    ("First use the greet tool to greet 'Alice'", _greet_then_echo),
    ("Call mcp__multi__echo with text='test' and mcp__multi__greet", lambda req: _after_tools(
        req) or calls(req, ("mcp__multi__echo", {"text": "test"}),
                      ("mcp__multi__greet", {"name": "Bob"}))),
    ("Call the mcp__noperm__echo tool", lambda req: _after_tools(req) or calls(
        req, ("mcp__noperm__echo", {"text": "hi"}))),
    ("Count how many Python files are in src/claude_agent_sdk/", _structured(
        lambda req: {"file_count": _count_lines(req, ".py"), "has_tests": True,
                     "test_file_count": 0},
        [("Glob", {"pattern": "src/claude_agent_sdk/**/*.py"}),
         ("Bash", {"command": "find src/claude_agent_sdk -name '*.py'",
                   "description": "Find Python files"})])),
    ("Analyze this text: 'Hello world'", _structured(
        lambda req: {"analysis": {"word_count": 2, "character_count": 11},
                     "words": ["Hello", "world"]})),
    ("Search for test files in the tests/ directory", _structured(
        lambda req: {"has_tests": _count_lines(req) > 0, "test_framework": "pytest",
                     "test_count": _count_lines(req)},
        [("Grep", {"pattern": "import pytest", "path": "tests",
                   "output_mode": "files_with_matches"}),
         ("Bash", {"command": "grep -rl 'import pytest' tests",
                   "description": "Find pytest imports"})])),
    ("Count how many files are in the current directory", _structured(
        lambda req: {"file_count": _count_lines(req),
                     "has_readme": "readme" in _earlier_results(req).lower()},
        ("Bash", {"command": "ls -1", "description": "List files"}))),
    ("Use the Write tool to create the file", _write_file),
]  # fmt: skip


def play(req: Request) -> Reply:
    """The scripted model: see the module's docstring."""
    if req.model.startswith("claude-nonexistent"):
        return error_reply(404, "not_found_error", f"model: {req.model}")
    prompt = prompt_of(req)
    for piece, script in SCRIPTS:
        if piece in prompt:
            reply = script(req)
            if piece.startswith("Count from 1 to 100"):
                reply.pace = SLOW_PACE
            return reply
    return text_reply("ok")


def describe(req: Request) -> str:
    """One line about a request, for a failing run's report."""
    body = {k: v for k, v in req.body.items() if k not in ("messages", "system", "tools")}
    options = json.dumps(body)[:300]
    return f"{prompt_of(req)[:60]!r} turn {req.turn} tools {req.tool_names} {options}"
