"""Result lines signed by isoagent: what a resume trusts, wherever the ``-o`` file went.

Each line ``isoagent batch`` writes ends with ``"sig":"<HMAC-SHA256>"``: the line up to it,
signed with a key of the user's (``batch-lines.key``, 32 random bytes, mode 0600, in the
user's state folder ``$XDG_STATE_HOME/isoagent/runs``, which sandboxed children cannot read;
made the first time it is needed, opened without following a link). A line keeps its
signature when the file is copied, moved, cut short or resumed elsewhere, and loses it
when anything in it is changed; a child that appends an ``ok`` line cannot sign it. With
``--sandbox off`` (or no mount namespaces to hide the state folder) a child can read the key.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets

from isoagent.parent.records.run_folder import open_base, state_runs

KEY_NAME = "batch-lines.key"
KEY_BYTES = 32
SIG_FIELD = b',"sig":"'  # how a line's signature starts: its last field
_HEX_DIGITS = 2 * hashlib.sha256().digest_size
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class LineSigner:
    """Signs result lines and checks them, with the user's key."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = user_key() if key is None else key

    def sign(self, line: bytes) -> bytes:
        """``line``, encoded with an empty ``sig`` as its last field, with it filled in."""
        unsigned = line.removesuffix(b'"}')
        if not unsigned.endswith(SIG_FIELD):
            raise ValueError("a result line ends with its empty sig field")
        return unsigned + self._mac(line).encode() + b'"}'

    def verify(self, line: bytes) -> bool:
        """Whether ``line`` (without its newline) is as isoagent signed it with this key."""
        start = line.rfind(SIG_FIELD)
        if start < 0 or not line.endswith(b'"}'):
            return False
        given = line[start + len(SIG_FIELD) : -2]
        if len(given) != _HEX_DIGITS:
            return False
        unsigned = line[: start + len(SIG_FIELD)] + b'"}'
        return hmac.compare_digest(given, self._mac(unsigned).encode())

    def _mac(self, unsigned: bytes) -> str:
        return hmac.new(self.key, unsigned, hashlib.sha256).hexdigest()


def user_key() -> bytes:
    """The user's key, made once: written whole under a name of its own, then linked to
    its name, so that two batches making it at once both read the one that won."""
    folder = open_base(state_runs())
    try:
        with contextlib.suppress(FileExistsError):
            _make_key(folder)
        fd = os.open(KEY_NAME, _OPEN, dir_fd=folder)
        with os.fdopen(fd, "rb") as file:
            key = file.read(KEY_BYTES + 1)
    finally:
        os.close(folder)
    if len(key) != KEY_BYTES:
        where = state_runs() / KEY_NAME
        raise OSError(0, f"{where} is not a key isoagent made: remove it", str(where))
    return key


def _make_key(folder: int) -> None:
    if _exists(KEY_NAME, folder):
        return
    draft = f".{KEY_NAME}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(draft, _CREATE, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(secrets.token_bytes(KEY_BYTES))
        os.link(draft, KEY_NAME, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
    finally:
        os.unlink(draft, dir_fd=folder)


def _exists(name: str, folder: int) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
