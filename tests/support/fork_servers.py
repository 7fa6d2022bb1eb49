"""A session's fork server outside a session: on an event loop in a thread of its own, as a
session has them (the parent's hands' tests and the bench's parent tools row)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from isoagent.parent.children.forkserver import ForkServer
from isoagent.parent.children.launch import fork_server_for


@contextlib.contextmanager
def fork_server_on_a_loop() -> Iterator[tuple[ForkServer, asyncio.AbstractEventLoop]]:
    """A fork server (not started: its first fork starts it) and the loop it runs on; both
    ended on the way out."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = fork_server_for(None)
    assert server is not None
    try:
        yield server, loop
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        left = asyncio.all_tasks(loop)  # its reader, which the close has not yet woken
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.wait(left))
        loop.close()
