"""Which commands a restricted ``bash`` may run: Claude Code's ``Bash(git:*)`` rules.

A rule is a command prefix (``git`` from ``Bash(git:*)``, ``npm run test`` from
``Bash(npm run test:*)``) or an exact command (``Bash(git status)``). A compound
command is split into its simple commands (at ``;``, ``&&``, ``||``, ``|``, ``&`` and
newlines) and every one of them must match an allow rule and no deny rule. What cannot
be checked word by word is refused: command or process substitution, subshells and
groups, backgrounded blocks, redirections other than to ``/dev/null`` or another fd.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

_SEPARATOR_CHARS = frozenset(";&|\n")
_PUNCTUATION = frozenset(";&|()<>\n")
_SAFE_TARGETS = frozenset({"/dev/null"})


class CommandRefused(Exception):
    """The command is not allowed; the message says which part and why."""


@dataclass(frozen=True)
class Rule:
    """``words`` must be the command's first words; ``exact``: and nothing after them."""

    words: tuple[str, ...]
    exact: bool

    @classmethod
    def parse(cls, pattern: str) -> Rule:
        """``git:*`` or ``git *`` -> prefix rule; ``git status`` -> exact rule."""
        text = pattern.strip()
        exact = True
        for suffix in (":*", " *", "*"):
            if text.endswith(suffix):
                text, exact = text[: -len(suffix)].rstrip(), False
                break
        words = tuple(shlex.split(text)) if text else ()
        return cls(words, exact)

    def matches(self, words: list[str]) -> bool:
        if not self.words:
            return not self.exact or not words
        head = tuple(words[: len(self.words)])
        return head == self.words and (not self.exact or len(words) == len(self.words))

    def __str__(self) -> str:
        text = " ".join(self.words)
        return text if self.exact else f"{text}:*"


def simple_commands(command: str) -> list[list[str]]:
    """The words of each simple command in ``command``; CommandRefused if it has parts
    whose effect cannot be known from their words."""
    for marker in ("$(", "`", "<(", ">(", "${"):
        if marker in command:
            raise CommandRefused(f"{marker!r} (substitution) cannot be checked against the rules")
    lexer = shlex.shlex(command, posix=True, punctuation_chars="".join(sorted(_PUNCTUATION)))
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise CommandRefused(f"cannot parse the command: {exc}") from None
    commands: list[list[str]] = [[]]
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token and set(token) <= _SEPARATOR_CHARS:
            commands.append([])
        elif (token and set(token) <= _PUNCTUATION) or token in ("{", "}"):
            if set(token) & set("(){}"):
                raise CommandRefused("subshells and command groups cannot be checked")
            target = tokens[i + 1] if i + 1 < len(tokens) else ""
            to_null = token in (">", ">>", "&>", "&>>") and target in _SAFE_TARGETS
            if not (to_null or (token in (">&", "<&") and target.isdigit())):
                raise CommandRefused(f"the redirection `{token} {target}` is not allowed")
            words = commands[-1]
            if words and words[-1].isdigit():  # the fd of `2>`
                words.pop()
            i += 1
        else:
            commands[-1].append(token)
        i += 1
    return [words for words in commands if words]


def check(command: str, allow: Sequence[str], deny: Sequence[str] = ()) -> None:
    """Raise CommandRefused unless every simple command matches an allow rule (any, when
    ``allow`` is empty) and no deny rule."""
    allow_rules = [Rule.parse(p) for p in allow]
    deny_rules = [Rule.parse(p) for p in deny]
    commands = simple_commands(command)
    if not commands:
        raise CommandRefused("empty command")
    for words in commands:
        shown = shlex.join(words)
        if any(rule.matches(words) for rule in deny_rules):
            raise CommandRefused(f"`{shown}` matches a denied rule")
        if allow_rules and not any(rule.matches(words) for rule in allow_rules):
            allowed = ", ".join(f"Bash({rule})" for rule in allow_rules)
            raise CommandRefused(f"`{shown}` is not allowed; this agent may run only {allowed}")
