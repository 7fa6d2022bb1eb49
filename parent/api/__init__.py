"""isoagent: run Claude subagents as separate OS processes.

This is the import package's root (``parent/api/`` in the repository, mapped to ``isoagent``
by ``pyproject.toml``). Every child process imports it first, so it imports nothing itself.
"""
