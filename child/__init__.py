"""The isoagent child process: ``python -m child``.

Imports msgspec, ``protocol`` and the standard library only (never anthropic,
never click, never ``parent``), so it starts near the interpreter's floor.
"""
