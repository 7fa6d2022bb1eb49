"""Programs that embed ``isoagent`` as a user's would, run as processes of their own so a
test can signal them: ``python -m tests.support.api_apps APP WORKSPACE``.

Each says what it saw, one line at a time on stdout. A prompt of ``hang`` is one the test's
model answers with a command that never ends (see ``tests/test_api_signals.py``).

- ``sync``: installs its own SIGTERM handler (``signal.signal``), calls ``isoagent.task``,
  then prints whether its handler is still the one installed and runs it; then calls
  ``isoagent.task("hang")`` and prints ``KeyboardInterrupt`` when Ctrl-C ends it.
- ``async``: an asyncio service: its own SIGTERM handler on its loop
  (``loop.add_signal_handler``), ``await isoagent.atask``, SIGTERM sent to itself (its
  handler prints ``SIGTERM handled``); then ``await isoagent.atask("hang")`` until Ctrl-C,
  which ``asyncio.run`` turns into ``KeyboardInterrupt``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from types import FrameType

import isoagent


def _say(*words: object) -> None:
    print(*words, flush=True)


def sync_app(workspace: str) -> None:
    def on_term(signum: int, frame: FrameType | None) -> None:
        _say("SIGTERM handled")

    signal.signal(signal.SIGTERM, on_term)
    _say(isoagent.task("hello", workdir=workspace).status)
    _say("handler kept" if signal.getsignal(signal.SIGTERM) is on_term else "handler lost")
    _say("wakeup fd", signal.set_wakeup_fd(-1))
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.1)  # the handler runs between two bytecodes of this thread
    try:
        isoagent.task("hang", workdir=workspace)
    except KeyboardInterrupt:
        _say("KeyboardInterrupt")


async def _service(workspace: str) -> None:
    handled = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, handled.set)
    _say((await isoagent.atask("hello", workdir=workspace)).status)
    os.kill(os.getpid(), signal.SIGTERM)
    try:
        await asyncio.wait_for(handled.wait(), 30)
        _say("SIGTERM handled")
    except TimeoutError:
        _say("SIGTERM not handled")
    await isoagent.atask("hang", workdir=workspace)


def async_app(workspace: str) -> None:
    try:
        asyncio.run(_service(workspace))
    except KeyboardInterrupt:
        _say("KeyboardInterrupt")


if __name__ == "__main__":
    # what an interactive program has; a test runner may have started us with SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    {"sync": sync_app, "async": async_app}[sys.argv[1]](sys.argv[2])
