"""Result lines signed by isoagent: what a resume trusts, wherever the ``-o`` file went.

Each line ``isoagent batch`` writes ends with ``"sig":"<HMAC-SHA256>"``: the line up to it,
signed with the user's key (``records/user_key.py``: 32 random bytes, mode 0600, in the
user's state folder, which sandboxed children cannot read; made the first time it is needed,
opened without following a link; run seals use it too, their input always begins
``isoagent transcript seal``, never a line's ``{``). A line keeps its
signature when the file is copied, moved, cut short or resumed elsewhere, and loses it
when anything in it is changed; a child that appends an ``ok`` line cannot sign it. With
``--sandbox off`` (or no mount namespaces to hide the state folder) a child can read the key.
"""

from __future__ import annotations

import hashlib
import hmac

from isoagent.parent.records.user_key import user_key

SIG_FIELD = b',"sig":"'  # how a line's signature starts: its last field
_HEX_DIGITS = 2 * hashlib.sha256().digest_size


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
