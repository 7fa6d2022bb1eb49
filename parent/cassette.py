"""Record and replay of model calls (being written; see issue 6)."""

from __future__ import annotations


class CassetteError(Exception):
    pass
