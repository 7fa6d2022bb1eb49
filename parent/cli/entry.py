"""The ``isoagent`` executable: a command that runs a session (``task``, ``run``, ``batch``,
``-p``) is handed to this user's warm daemon (``parent/daemon/client.py``: the standard
library only, so this process stays at the interpreter's floor); the rest, and a command the
daemon cannot take, runs here (``main.py``)."""

from __future__ import annotations

import sys


def main() -> None:
    from isoagent.parent.daemon import client

    code = client.run(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from isoagent.parent.cli.main import main as run_here

    run_here()
