"""The built-in agent types, as in Claude Code: Explore, Plan, general-purpose."""

from __future__ import annotations

from isoagent.protocol import AgentSpec

# Tools go by Claude Code's names, everywhere: what the model sees, hooks, permission rules,
# agent files, stream-json and transcripts (docs/pages/claude-code.md says why)
TASK_TOOL = "Agent"  # the parent's tool that starts a child (Claude Code's; "Task" before)
TASK_ALIASES = frozenset({TASK_TOOL, "Task"})  # what rules and agent files may call it
SEND_MESSAGE = "SendMessage"  # the parent's tool that continues a child that ended
BASE_TOOLS = ("Bash", "Read", "Write", "Edit", "Glob", "Grep")
READ_ONLY_TOOLS = ("Bash", "Read", "Glob", "Grep")
WRITE_TOOLS = frozenset({"Write", "Edit"})


def writes(agent: AgentSpec) -> bool:
    """Whether an agent type has a tool that writes files."""
    return not WRITE_TOOLS.isdisjoint(agent.tools)


_READ_ONLY_RULE = (
    "You are READ-ONLY: do not create, modify or delete any file. The operating system "
    "enforces this; a write will fail with a permission error."
)
_SUMMARY_RULE = (
    "Work autonomously; nobody can answer questions. When done, reply with a concise final "
    "summary of what you found or did: it is the only thing the caller will see."
)

BUILTIN_AGENTS: dict[str, AgentSpec] = {
    spec.name: spec
    for spec in (
        AgentSpec(
            name="Explore",
            description="Fast read-only agent for searching and understanding a codebase.",
            system_prompt=(
                "You are a file search specialist. Find files, search code and read what "
                f"matters to answer the task. {_READ_ONLY_RULE} {_SUMMARY_RULE}"
            ),
            tools=list(READ_ONLY_TOOLS),
        ),
        AgentSpec(
            name="Plan",
            description=(
                "Read-only software architect: explores and returns an implementation plan."
            ),
            system_prompt=(
                "You are a software architect. Explore the code and design a step-by-step "
                f"implementation plan naming the files to change. {_READ_ONLY_RULE} {_SUMMARY_RULE}"
            ),
            tools=list(READ_ONLY_TOOLS),
        ),
        AgentSpec(
            name="general-purpose",
            description=(
                "General agent with every base tool, for multi-step tasks that change files."
            ),
            system_prompt=(
                "You are a capable software engineer. Complete the task using your tools. "
                + _SUMMARY_RULE
            ),
            tools=list(BASE_TOOLS),
            delegates=True,  # Claude Code's general-purpose has every tool, Task too
        ),
    )
}
