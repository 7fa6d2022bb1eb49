"""isoagent's record of the workspaces this user trusts: ``trust.json`` in the user's state
folder (``run_folder.state_dir``), for each workspace (its real path) the SHA-256 of each of
its files that was trusted. A file is trusted while its content has that digest: a change
(a ``git pull``, a child's edit) asks again.

The file is replaced whole (written beside, renamed over it) under a lock, so two
invocations that trust at once both count; it is opened without following a link, in a
folder no sandboxed child can see.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from isoagent.parent.records.run_folder import open_state_dir

RECORD = "trust.json"
_LOCK = "trust.lock"
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_RECORD = 16 * 1024 * 1024


class TrustRecordError(Exception):
    """The record cannot be read or written; the message says why, in one line."""


def trusted_digests(workspace: Path) -> dict[str, str]:
    """The digests trusted for ``workspace``'s files, by name ({}: none; also when the
    record cannot be read: nothing is trusted then)."""
    try:
        with _state() as folder:
            entry = _read(folder).get(str(workspace), {})
    except (OSError, TrustRecordError):
        return {}
    files = entry.get("files") if isinstance(entry, dict) else None
    return {k: v for k, v in (files or {}).items() if isinstance(v, str)}


def trust(workspace: Path, digests: Mapping[str, str], *, replace: bool = False) -> None:
    """Record ``digests`` (file name -> SHA-256) as trusted in ``workspace``: added to what
    is recorded, or (``replace``) as all that is. ``TrustRecordError`` if it cannot be."""
    with _changing() as workspaces:
        entry = workspaces.get(str(workspace))
        files = {} if replace or not isinstance(entry, dict) else dict(entry.get("files") or {})
        files.update(digests)
        workspaces[str(workspace)] = {"files": files, "trusted": _now()}


def revoke(workspace: Path) -> bool:
    """Forget ``workspace``; whether it was recorded."""
    with _changing() as workspaces:
        return workspaces.pop(str(workspace), None) is not None


def recorded() -> dict[str, dict[str, Any]]:
    """Every workspace recorded: its files' digests (``files``) and when (``trusted``)."""
    try:
        with _state() as folder:
            workspaces = _read(folder)
    except OSError as exc:
        raise TrustRecordError(f"cannot read the trust record: {exc.strerror or exc}") from None
    return {k: v for k, v in workspaces.items() if isinstance(v, dict)}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@contextlib.contextmanager
def _state() -> Iterator[int]:
    folder = open_state_dir()
    try:
        yield folder
    finally:
        os.close(folder)


@contextlib.contextmanager
def _changing() -> Iterator[dict[str, Any]]:
    """The recorded workspaces, to change in place; written back when the block ends."""
    try:
        with _state() as folder:
            lock = os.open(_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                           dir_fd=folder)  # fmt: skip
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
                workspaces = _read(folder)
                yield workspaces
                _write(folder, workspaces)
            finally:
                os.close(lock)
    except OSError as exc:
        raise TrustRecordError(f"cannot write the trust record: {exc.strerror or exc}") from None


def _read(folder: int) -> dict[str, Any]:
    try:
        fd = os.open(RECORD, _READ, dir_fd=folder)
    except FileNotFoundError:
        return {}
    with os.fdopen(fd, "rb") as file:
        data = file.read(MAX_RECORD + 1)
    try:
        parsed = json.loads(data) if len(data) <= MAX_RECORD else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("workspaces"), dict):
        raise TrustRecordError(f"{RECORD} in the state folder is not isoagent's trust record")
    return dict(parsed["workspaces"])


def _write(folder: int, workspaces: dict[str, Any]) -> None:
    staged = f".{RECORD}.{secrets.token_hex(6)}"
    data = json.dumps({"version": 1, "workspaces": workspaces}, indent=1).encode()
    fd = os.open(staged, _NEW, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.rename(staged, RECORD, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staged, dir_fd=folder)
        raise
