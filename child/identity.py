"""Who a child is and what environment it keeps: from its Task, not from a login.

A local child is started with an allow-listed environment that already carries its
tag and depth. A remote child arrives through ssh, srun or kubectl with whatever the
login there gives it (``SSH_CONNECTION``, ``SLURM_*``, a user's exports) and with none
of the parent's folders: it keeps the allow-list a local child gets, makes its own
temporary folder on its host, and takes its tag and depth from the Task's identity,
so that what its commands start is found and ended there as it would be here.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping

from isoagent.child.agent.process_tree import SPARED, TAG_VARIABLE, signal_processes
from isoagent.protocol import Identity

ENV_ALLOW = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ")
DEPTH_VARIABLE = "ISOAGENT_DEPTH"
# what makes a dynamic loader, an interpreter or a shell run code of the variable's choosing
# as a process starts: none reaches a process that is not confined yet (a config's variables
# are applied inside the confinement: confine_command.CONFINED_ENV)
LOADER_PREFIXES = ("LD_", "DYLD_", "PYTHON", "PERL5", "PERLLIB", "RUBY", "NODE_", "GCONV_")
LOADER_NAMES = frozenset(
    {"BASH_ENV", "ENV", "ZDOTDIR", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND",
     "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "GIT_EXEC_PATH", "GIT_CONFIG",
     "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "MALLOC_CONF", "LUA_INIT", "TCLLIBPATH"}
)  # fmt: skip


def allowed_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The allow-listed part of an environment: never a key or a token, never a loader's
    or an interpreter's variable."""
    return {k: v for k, v in environ.items() if k in ENV_ALLOW or k.startswith("LC_")}


def is_loader_variable(name: str) -> bool:
    """Whether ``name`` makes a loader, an interpreter or a shell run code at a start."""
    return name in LOADER_NAMES or name.startswith(LOADER_PREFIXES)


def identity_environment(identity: Identity, tmpdir: str) -> dict[str, str]:
    """What a child's environment holds besides the allow-list."""
    return {
        "TMPDIR": tmpdir,
        TAG_VARIABLE: identity.tag,
        "PYTHONDONTWRITEBYTECODE": "1",
        DEPTH_VARIABLE: str(identity.depth),
    }


def settle_on_host(identity: Identity) -> str:
    """For a child on another host: make its temporary folder where that host keeps
    them, reduce this process's environment to what a local child's holds, and leave
    a janitor behind (``_clean_up_after``). Returns the folder."""
    import tempfile  # here: a local child never needs it, and it costs its start a millisecond

    tmpdir = tempfile.mkdtemp(prefix="isoagent-")  # the host's TMPDIR, read before it goes
    env = allowed_environment()
    env.update(identity_environment(identity, tmpdir))
    os.environ.clear()
    os.environ.update(env)
    _clean_up_after(tmpdir, identity.tag)
    return tmpdir


def _clean_up_after(tmpdir: str, tag: str) -> None:
    """Fork a janitor, before any thread and any sandbox: when this process ends, however
    it ends (SIGKILL included), it kills what still carries ``tag`` and removes
    ``tmpdir``, which a sandboxed child cannot remove itself (Landlock forbids its parent)."""
    alive_read, _alive_write = os.pipe()  # close-on-exec: commands never hold it open
    janitor = os.fork()
    if janitor != 0:
        os.close(alive_read)
        SPARED.add(janitor)  # not one of the commands the child ends
        return  # the write end stays open, unused, until this process ends
    try:
        # the protocol's pipes above all: their ends must close with the child's
        for low, high in ((0, 2), (3, alive_read), (alive_read + 1, os.sysconf("SC_OPEN_MAX"))):
            os.closerange(low, high)
        for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # a session's end must not stop the clean-up
        with contextlib.suppress(OSError):
            os.read(alive_read, 1)  # returns at the child's end
        signal_processes(signal.SIGKILL, tag=tag)
        import shutil

        shutil.rmtree(tmpdir, ignore_errors=True)
    finally:
        os._exit(0)
