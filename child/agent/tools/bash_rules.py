"""Which commands a restricted ``Bash`` may run: Claude Code's ``Bash(git:*)`` rules.

A rule is a command prefix (``git`` from ``Bash(git:*)``, ``npm run test`` from
``Bash(npm run test:*)``) or an exact command (``Bash(git status)``). A compound
command is split into its simple commands (at ``;``, ``&&``, ``||``, ``|``, ``&`` and
newlines) and every one of them must match an allow rule and no deny rule. What cannot
be checked word by word is refused: command or process substitution, subshells and
groups, backgrounded blocks, redirections other than to ``/dev/null`` or another fd.

``git`` is a command that runs commands (aliases, hooks, ``core.fsmonitor``, pagers, the
transport's ``--upload-pack``), so an agent held to prefix rules runs it word-checked
(``check_git``: no global option that changes its config, repository or exec path; no
option, subcommand or URL that names a command to run) and with a locked configuration
(``GIT_LOCKED``: no hooks, no fsmonitor, no repository it did not find as ``.git``, no
transport but the usual ones).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_SEPARATOR_CHARS = frozenset(";&|\n")
_PUNCTUATION = frozenset(";&|()<>\n")
_SAFE_TARGETS = frozenset({"/dev/null"})


# git's global options (before the subcommand) that change nothing it runs or reads
_GIT_SAFE_GLOBALS = frozenset(
    [
        "-p",
        "--paginate",
        "-P",
        "--no-pager",
        "--no-replace-objects",
        "--no-lazy-fetch",
        "--no-optional-locks",
        "--no-advice",
        "--literal-pathspecs",
        "--glob-pathspecs",
        "--noglob-pathspecs",
        "--icase-pathspecs",
        "--version",
        "--help",
        "--html-path",
        "--man-path",
        "--info-path",
        "--exec-path",
    ]
)
# git's own commands that run nothing of the agent's choosing (their options are checked
# below): no alias (which may be `!sh …`), no git-<name> program, no difftool, mergetool,
# hook, credential helper, daemon, maintenance, send-email, filter-branch, remote-ext
_GIT_COMMANDS = frozenset(
    [
        "add",
        "am",
        "annotate",
        "apply",
        "archive",
        "bisect",
        "blame",
        "branch",
        "bundle",
        "cat-file",
        "check-attr",
        "check-ignore",
        "check-mailmap",
        "check-ref-format",
        "checkout",
        "cherry",
        "cherry-pick",
        "clean",
        "clone",
        "column",
        "commit",
        "commit-graph",
        "commit-tree",
        "count-objects",
        "describe",
        "diff",
        "diff-files",
        "diff-index",
        "diff-tree",
        "fetch",
        "for-each-ref",
        "format-patch",
        "fsck",
        "gc",
        "grep",
        "hash-object",
        "help",
        "init",
        "interpret-trailers",
        "log",
        "ls-files",
        "ls-remote",
        "ls-tree",
        "merge",
        "merge-base",
        "merge-file",
        "merge-tree",
        "mktree",
        "mv",
        "name-rev",
        "notes",
        "pull",
        "push",
        "range-diff",
        "read-tree",
        "rebase",
        "reflog",
        "remote",
        "repack",
        "reset",
        "restore",
        "rev-list",
        "rev-parse",
        "revert",
        "rm",
        "shortlog",
        "show",
        "show-branch",
        "show-ref",
        "sparse-checkout",
        "stage",
        "stash",
        "status",
        "stripspace",
        "submodule",
        "switch",
        "symbolic-ref",
        "tag",
        "update-index",
        "update-ref",
        "var",
        "verify-commit",
        "verify-tag",
        "version",
        "whatchanged",
        "worktree",
        "write-tree",
        "config",
    ]
)
# long options (any unambiguous abbreviation of them works) that name a command, a config
# or a template of hooks
_GIT_RUNNING_OPTIONS = (
    "upload-pack",
    "receive-pack",
    "exec",
    "open-files-in-pager",
    "config",
    "template",
    "output",  # a file of its choosing (.git/config) with text of its choosing
)
# short options that do the same, by subcommand: clone -c/-u, rebase -x, grep -O
_GIT_RUNNING_SHORT = {"clone": "cu", "rebase": "x", "grep": "O"}
# subcommands and their first arguments that run a command given to them
_GIT_RUNNING_ACTIONS = {("bisect", "run"), ("submodule", "foreach")}
_GIT_READ_CONFIG = frozenset(
    ["--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l", "get", "list"]
)
# <transport>::<address>: a remote helper (ext:: runs its address as a command)
_HELPER_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_GLOB_CHARS = frozenset("*?[")

# git's configuration for an agent held to prefix rules, as command-line config (it wins
# over every file): the environment variables git reads it from
_GIT_SETTINGS = {
    "core.hooksPath": "/dev/null",
    "core.fsmonitor": "false",
    "safe.bareRepository": "explicit",  # no bare repository planted in the workspace
    "protocol.allow": "never",
    **{f"protocol.{name}.allow": "always" for name in ("https", "http", "ssh", "git", "file")},
}
GIT_LOCKED: Mapping[str, str] = {
    "GIT_CONFIG_NOSYSTEM": "1",
    # editors and pagers as the environment names them win over any config's command
    "GIT_EDITOR": "true",  # a commit without -m keeps its template; rebase -i its list
    "GIT_SEQUENCE_EDITOR": "true",
    "GIT_PAGER": "cat",
    "GIT_CONFIG_COUNT": str(len(_GIT_SETTINGS)),
    **{f"GIT_CONFIG_KEY_{i}": key for i, key in enumerate(_GIT_SETTINGS)},
    **{f"GIT_CONFIG_VALUE_{i}": value for i, value in enumerate(_GIT_SETTINGS.values())},
}


def rule_path(path: str, writable: Sequence[str]) -> str:
    """``PATH`` for an agent held to rules: without the folders it could plant a ``git``
    (or a ``git-<name>`` subcommand) in, relative ones (its workspace) and those in
    ``writable``, so that ``git`` is the ``git`` the user has."""
    places = [os.path.realpath(folder) for folder in writable]
    kept = []
    for entry in path.split(":"):
        real = os.path.realpath(entry) if os.path.isabs(entry) else ""
        if real and not any(os.path.commonpath([real, place]) == place for place in places):
            kept.append(entry)
    return ":".join(kept)


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
    if "\\\n" in command:  # bash joins the lines, shlex keeps the newline in the word
        raise CommandRefused("a line continuation (`\\` at a line's end) cannot be checked")
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
        if allow_rules and os.path.basename(words[0]) == "git":
            check_git(words)


def check_git(words: list[str]) -> None:
    """Refuse a git command that could run a command of the agent's choosing."""
    shown = shlex.join(words)

    def refuse(why: str) -> CommandRefused:
        return CommandRefused(f"`{shown}`: {why}")

    for word in words[1:]:
        if word[:1] in _GLOB_CHARS or (word.startswith("-") and _GLOB_CHARS & set(word)):
            raise refuse(f"{word!r} could expand to any file's name, an option too; use ./{word}")
        if "$" in word or word.startswith("{"):  # `$X--upload-pack=…`, `{--upload-pack=…,x}`
            raise refuse(f"{word!r} could expand to any word (a `$` or `{{`), an option too")
        if _HELPER_URL.match(word):
            raise refuse(f"{word!r} names a remote helper (<transport>::), which git may run")
    args = words[1:]
    while args and args[0].startswith("-"):
        if args[0] not in _GIT_SAFE_GLOBALS:
            raise refuse(f"git's global option {args[0].split('=')[0]} is not allowed here")
        args = args[1:]
    if not args:
        return
    sub, rest = args[0], args[1:]
    if sub not in _GIT_COMMANDS:
        raise refuse(
            f"`git {sub}` is not one of the git commands allowed here (no alias, no git-<name>)"
        )
    if rest and (sub, rest[0]) in _GIT_RUNNING_ACTIONS:
        raise refuse(f"`git {sub} {rest[0]}` runs the command it is given")
    if sub == "config" and not (
        (rest and rest[0] in _GIT_READ_CONFIG) or (len(rest) == 1 and not rest[0].startswith("-"))
    ):
        raise refuse("`git config` may only read here (a value, --get, --list)")
    short = _GIT_RUNNING_SHORT.get(sub, "")
    for word in rest:
        if word == "--":
            break
        if word.startswith("--") and len(word) > 2:
            name = word[2:].split("=", 1)[0]
            if any(option.startswith(name) for option in _GIT_RUNNING_OPTIONS):
                raise refuse(f"the option --{name} can run a command or set a config")
        elif word.startswith("-") and set(word[1:]) & set(short):
            raise refuse(f"the option {word} of `git {sub}` can run a command or set a config")
