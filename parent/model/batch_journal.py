"""The Message Batches a batch sent for its ``-o`` file, kept for the rerun that resumes it.

Before a Message Batch is sent, a line names its requests (each custom_id with the digest of
its request); once the API has taken it, a line names the batch. A rerun with the same ``-o``
reads them: a turn whose request is one already sent is answered from that batch's results
(fetched, or waited for if it is still in flight), so a turn is not paid twice. Its children
start again from their prompt, and each turn they repeat is the same request as before (the
model's answers are the same ones, from the results) until the turn that was in flight.

The journal lies in the run base beside ``-o``'s ledger (``batch-<key>.batches.jsonl``):
read-only to sandboxed children, opened without following a link.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections import defaultdict
from pathlib import Path

import msgspec

from isoagent.parent.records.run_folder import open_base

_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW


class Sending(msgspec.Struct, tag=True):
    """Requests about to be sent as one Message Batch: custom_id -> digest."""

    requests: dict[str, str]


class Sent(msgspec.Struct, tag=True):
    """The Message Batch that holds the requests of the ``Sending`` line before it."""

    batch: str
    requests: dict[str, str]


_entry = msgspec.json.Decoder(Sending | Sent)
_encoder = msgspec.json.Encoder()


def digest(request: bytes) -> str:
    return hashlib.sha256(request).hexdigest()[:32]


class BatchJournal:
    """One ``-o`` file's journal, opened for appending; ``earlier``: what earlier runs sent,
    each request's digest -> the (batch, custom_id) that hold it, oldest first."""

    def __init__(self, path: Path) -> None:
        """Raises OSError if it cannot be opened."""
        base = open_base(path.parent)
        try:
            self.fd = os.open(path.name, _APPEND, 0o600, dir_fd=base)
        finally:
            os.close(base)
        self.path = path
        self.earlier: defaultdict[str, list[tuple[str, str]]] = defaultdict(list)
        self.unsent = 0  # requests of a Sending line no Sent line followed: a killed send
        with os.fdopen(os.dup(self.fd), "rb") as file:
            sending: dict[str, str] = {}
            for line in file:
                with contextlib.suppress(msgspec.DecodeError):  # a line cut by a kill
                    entry = _entry.decode(line)
                    if isinstance(entry, Sending):
                        self.unsent += len(sending)
                        sending = entry.requests
                        continue
                    for custom_id, request in entry.requests.items():
                        self.earlier[request].append((entry.batch, custom_id))
                    sending = {}
            self.unsent += len(sending)

    def take(self, request: str) -> tuple[str, str] | None:
        """The oldest earlier (batch, custom_id) of ``request``, not to be taken again."""
        found = self.earlier.get(request)
        return found.pop(0) if found else None

    def sending(self, requests: dict[str, str]) -> None:
        self._write(Sending(requests))

    def sent(self, batch: str, requests: dict[str, str]) -> None:
        self._write(Sent(batch, requests))

    def close(self) -> None:
        os.close(self.fd)

    def _write(self, entry: Sending | Sent) -> None:
        """Raises OSError (a full disk): the batch is then not sent."""
        line = _encoder.encode(entry) + b"\n"
        written = os.write(self.fd, line)
        if written != len(line):
            raise OSError(f"{self.path}: a line written in part")
