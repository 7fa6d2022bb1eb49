"""The user's secret key, in the state folder (``run_folder.state_dir``): what marks the
runs this user's isoagent wrote (``run_seal.py``).

The folder is 0700, opened without following a link, and hidden from every sandboxed child
(``sandbox_policy.hidden_paths``): a child that read the key could forge a run.
"""

from __future__ import annotations

import functools
import os
import secrets

from isoagent.parent.records.run_folder import open_state_dir, state_dir

KEY_FILE = "key"
KEY_BYTES = 32


def user_key() -> bytes:
    """This user's secret key, made at first use (random, 0600, never in a workspace)."""
    state = str(state_dir())
    return _user_key(state)


@functools.lru_cache(maxsize=2)
def _user_key(_state: str) -> bytes:
    folder = open_state_dir()
    try:
        try:
            return _read_key(folder)
        except FileNotFoundError:
            pass
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        # made under another name and linked into place: a reader never sees half a key
        staged = f".{KEY_FILE}.{secrets.token_hex(6)}"
        fd = os.open(staged, flags, 0o600, dir_fd=folder)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(staged, KEY_FILE, src_dir_fd=folder, dst_dir_fd=folder)
        except FileExistsError:
            pass  # another invocation made it first: its key is the user's
        finally:
            os.unlink(staged, dir_fd=folder)
        return _read_key(folder)
    finally:
        os.close(folder)


def _read_key(folder: int) -> bytes:
    fd = os.open(KEY_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    try:
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise OSError(f"{KEY_FILE} in {state_dir()} is not a key of {KEY_BYTES} bytes")
    return key
