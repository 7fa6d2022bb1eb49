"""A stand-in for ``ssh HOST --``, for tests: ``python launcher_emulator.py ROOT HOST -- CMD...``.

Like ssh, it joins CMD into one line and runs it with ``sh -c`` on "the host", whose
filesystem is ``ROOT/HOST`` (no folder of the parent's is handed over): a login-like
environment (``HOME=ROOT/HOST/home``, ``TMPDIR=ROOT/HOST/tmp``, ``SSH_CONNECTION``, and
``LOGIN_SECRET``, which no child may keep), working directory ``HOME``, in a session of
its own (the parent cannot signal it: it must end by itself). The link is the
emulator's own relaying of stdin and stdout, so it can fail the ways a network does:

- ``ROOT/HOST/refuse`` exists: prints ssh's "Connection refused" line, appends a line to
  ``ROOT/HOST/refused``, exits 255;
- ``ROOT/HOST/silence`` appears: stops relaying either way and keeps everything open
  (a silent link: no bytes, no close);
- ``ROOT/HOST/cut`` appears: exits 255 at once, as ssh does when its connection drops;
- ``ROOT/HOST/queue`` holds a number: waits that many seconds before it starts the
  command, as a batch queue does;
- ``ROOT/HOST/banner`` exists: its text goes to stdout first, as from a login shell's
  ``.bashrc`` that prints.

Each launch appends ``start PID`` and ``end PID`` lines to ``ROOT/HOST/launches``.
Only the standard library: it is not part of isoagent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

LINK_LOST = 255


def main(root: Path, host: str, command: list[str]) -> int:
    home = root / host / "home"
    tmp = root / host / "tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    here = root / host
    if (here / "refuse").exists():
        with (here / "refused").open("a") as log:
            log.write("refused\n")
        print(f"ssh: connect to host {host} port 22: Connection refused", file=sys.stderr)
        return LINK_LOST
    if (here / "banner").exists():
        sys.stdout.buffer.write((here / "banner").read_bytes())
        sys.stdout.flush()
    if (here / "queue").exists():
        time.sleep(float((here / "queue").read_text()))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "USER": "remote",
        "LOGNAME": "remote",
        "SHELL": "/bin/sh",
        "MAIL": f"/var/mail/{host}",
        "TMPDIR": str(tmp),
        "SSH_CONNECTION": "10.0.0.1 50000 10.0.0.2 22",
        "LOGIN_SECRET": f"login-secret-of-{host}",
    }
    child = subprocess.Popen(
        ["sh", "-c", " ".join(command)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=home,
        env=env,
        start_new_session=True,
    )
    with (here / "launches").open("a") as log:
        log.write(f"start {child.pid}\n")
    assert child.stdin is not None and child.stdout is not None
    up = [
        threading.Thread(target=relay, args=(source, target, here), daemon=True)
        for source, target in ((sys.stdin, child.stdin), (child.stdout, sys.stdout))
    ]
    for thread in up:
        thread.start()
    while child.poll() is None and not (here / "cut").exists():
        time.sleep(0.05)
    if child.returncode is None:
        os._exit(LINK_LOST)
    up[1].join()  # the child's last frames
    with (here / "launches").open("a") as log:
        log.write(f"end {child.pid}\n")
    return LINK_LOST if child.returncode < 0 else child.returncode  # as ssh reports a signal


def relay(source: IO[Any], target: IO[Any], here: Path) -> None:
    """Copy ``source`` to ``target`` until EOF, or until the link is silenced."""
    while data := os.read(source.fileno(), 1 << 16):
        if (here / "silence").exists():
            while True:  # hold both ends open, pass nothing on
                time.sleep(60)
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(target.fileno(), view) :]
        except BrokenPipeError:
            return
    target.close()


if __name__ == "__main__":
    root, host, dashes, *words = sys.argv[1:]
    assert dashes == "--", "usage: launcher_emulator.py ROOT HOST -- CMD..."
    sys.exit(main(Path(root), host, words))
