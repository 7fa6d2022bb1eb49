"""What ``isoagent batch`` wrote to an ``-o`` file, kept where its children cannot write.

Resuming skips the tasks with an ``ok`` line in ``-o``. A writing child can reach that
file (it may lie in the workspace), so an ``ok`` line there proves nothing: a child could
append one for a task that never ran, and resume would skip it. So the parent also keeps
the SHA-256 of every line it writes to ``-o`` in a ledger in the run base
(``.isoagent/runs/batch-<hash of -o's path>.sha256``: read-only to sandboxed children,
opened without following a link), and resume trusts only the lines found there. A line
that is not (forged, changed, or written by an older isoagent) counts as not written:
its task runs again. With ``--sandbox off`` a child can write the ledger too.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from isoagent.parent.run_folder import open_base

_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class Ledger:
    def __init__(self, runs_dir: Path, output: Path) -> None:
        key = hashlib.sha256(os.fsencode(output.resolve())).hexdigest()[:32]
        self.path = runs_dir / f"batch-{key}.sha256"
        base = open_base(runs_dir)
        try:
            self.fd = os.open(self.path.name, _APPEND, 0o600, dir_fd=base)
        finally:
            os.close(base)
        with os.fdopen(os.dup(self.fd), "rb") as file:
            self.written = set(file.read().split())

    def trusts(self, line: bytes) -> bool:
        """Whether ``line`` (without its newline) is one the parent wrote."""
        return _digest(line) in self.written

    def record(self, line: bytes) -> None:
        """Note a line about to be written to ``-o`` (its newline included or not): a
        batch killed in between leaves a digest of no line, never a line without one."""
        digest = _digest(line.removesuffix(b"\n"))
        os.write(self.fd, digest + b"\n")
        self.written.add(digest)


def _digest(line: bytes) -> bytes:
    return hashlib.sha256(line).hexdigest().encode()
