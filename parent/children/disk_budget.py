"""What the parent writes for one child in the run folder, held to a budget.

A child decides what the parent writes for it: each new message of its model calls goes to
its transcript before the gateway sees it, a Result too large to hold is spooled to the run
folder as it arrives, and a long summary is kept whole in a file of its own. A child is
untrusted, so all three count against one budget (``--child-disk-mb``); the write that
would pass it is not made, and the child is ended with the budget named. Its stderr log has
a cap of its own (``connection.log_cap``).
"""

from __future__ import annotations

from isoagent.parent.children.connection import FrameRefused


class DiskBudget:
    """Bytes the parent holds in the run folder for one child, at most ``limit`` (0: any)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        # the child is ending (it passed the budget, or its run is over): what the parent
        # still writes of its end (its last record) is counted, never refused
        self.ending = False

    def spend(self, size: int) -> None:
        """Count ``size`` more bytes, to be written; ``FrameRefused`` if they would pass the
        budget (once: the child ends with it)."""
        if self.limit and self.held + size > self.limit and not self.ending:
            self.ending = True
            raise FrameRefused(
                f"went past its disk budget: the parent writes at most {self.limit >> 20} MiB "
                "for a child in the run folder (its transcript, a Result too large to hold and "
                "its summary; --child-disk-mb)"
            )
        self.held += size

    def give_back(self, size: int) -> None:
        """``size`` bytes counted before are gone (a spooled frame, once taken)."""
        self.held -= size
