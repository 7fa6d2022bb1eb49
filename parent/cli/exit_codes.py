"""Exit codes of every isoagent command (also listed in ``--help`` and the README)."""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

from isoagent.errors import STATUS_ERRORS

if TYPE_CHECKING:  # --help imports this module, and nothing that needs msgspec
    from isoagent.protocol import Status


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1  # the run failed: model/API error, bad key, unreachable server
    USAGE = 2  # bad command line or input
    MAX_TURNS = 3  # an agent stopped at its turn limit
    CHILD_FAILED = 4  # a child crashed, was killed, timed out, or broke the protocol
    BUDGET = 5  # the run's token budget ran out
    TASKS_FAILED = 6  # batch: at least one task did not end ok, or an input line was bad
    INTERRUPTED = 130  # Ctrl-C (SIGINT); SIGHUP gives 129, SIGTERM 143 (128 + the signal)
    READER_GONE = 141  # whoever read stdout went away (as if SIGPIPE had ended us)


# the API's error classes say each failure's code (one table: ``isoagent.errors``)
STATUS_EXIT = {"ok": ExitCode.OK} | {
    status: ExitCode(error.exit_code) for status, error in STATUS_ERRORS.items()
}


def exit_code_for(status: Status) -> ExitCode:
    return STATUS_EXIT[status]


EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 error (API, key, server), 2 usage, 3 turn limit, "
    "4 child failed (crash, kill, timeout, launch), 5 token budget, 6 batch: some task not ok, "
    "130 interrupted (129 SIGHUP, 143 SIGTERM), 141 stdout's reader went away."
)
