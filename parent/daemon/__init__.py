"""The warm daemon and its thin client: one process per user and configuration that has
imported everything a session needs, and runs each ``isoagent`` invocation in a process
forked from it (``server.py``, ``session.py``); the ``isoagent`` executable hands its command
over (``client.py``) and falls back to running it itself."""
