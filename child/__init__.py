"""The isoagent child process: ``python -m isoagent.child``.

Imports msgspec, ``isoagent.protocol`` and the standard library only (never anthropic,
never click, never ``parent``), so it starts near the interpreter's floor.
"""
