"""Where this user's warm daemon listens: an abstract Unix socket named by everything it serves.

Standard library only, and cheap: the thin client (``client.py``) computes the address on
every invocation before it knows whether a daemon runs.

A daemon serves one user, one configuration and one build of the code, in one process
context; the address holds a digest of all of them, so a change of any starts another:
- the configuration: every variable the SDK reads (``ANTHROPIC_*``, proxies, certificates),
  so a changed key or server gets a daemon (and a gateway) of its own;
- the interpreter as installed (``sys.prefix`` and the resolved executable: ``.venv/bin/python``
  and ``.venv/bin/python3`` are one), and the code: the size and modification time of every
  module of the package, so an upgrade (or an edit of an editable install) is never served
  by a daemon that imported the older code;
- the process context (``context``): namespaces, root, cgroup, credentials, capabilities,
  seccomp, ``no_new_privs`` and hard resource limits. A process confined in any way the daemon is
  not gets a daemon of its own, started by it, which inherits its confinement; the daemon
  checks each peer's context against its own (``/proc/PID``), so no name chosen by a peer
  can make it act with more than the peer has.
"""

from __future__ import annotations

import os
import sys

PREFIX = "isoagent-daemon-"  # of every daemon's address; then the uid and the digest
GATEWAY_PREFIX = "isoagent-gateway-"  # of the gateway each daemon holds
WIRE_VERSION = 5  # of the frames on both sockets: another version, another address
DIGEST_HEX = 32

# what the SDK's HTTP client reads from the environment besides ANTHROPIC_*
_HTTP_VARIABLES = frozenset(
    {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR"}
)
# of /proc/PID/status: who the process is and what it may do
_STATUS_FIELDS = (
    "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
    "NoNewPrivs", "Seccomp", "Seccomp_filters",
)  # fmt: skip
_NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "time", "user", "uts")


def configuration(environ: os._Environ[str] | dict[str, str]) -> dict[str, str]:
    """The variables a daemon's model calls depend on."""
    return {
        k: v
        for k, v in environ.items()
        if k.startswith("ANTHROPIC_") or k.upper() in _HTTP_VARIABLES
    }


def context(pid: int | str = "self") -> list[str]:
    """What process ``pid`` may do and see, from ``/proc``: its namespaces, root, cgroup,
    credentials, capabilities, seccomp, ``no_new_privs`` and hard resource limits (``ulimit
    -n 1024`` bounds what its children may open, through a daemon too). OSError when unreadable
    (a process that is not dumpable keeps its namespaces to itself)."""
    where = f"/proc/{pid}"
    with open(f"{where}/status", encoding="utf-8") as status:
        fields = [line.rstrip() for line in status if line.split(":", 1)[0] in _STATUS_FIELDS]
    for name in _NAMESPACES:
        try:
            fields.append(os.readlink(f"{where}/ns/{name}"))
        except FileNotFoundError:  # a kernel without that namespace
            fields.append(f"{name}:none")
    root = os.stat(f"{where}/root")
    fields.append(f"root:{root.st_dev}:{root.st_ino}")
    with open(f"{where}/cgroup", encoding="utf-8") as cgroup:
        fields.append(cgroup.read())
    with open(f"{where}/limits", encoding="utf-8") as limits:
        fields += _hard_limits(limits.read())
    return fields


def _hard_limits(table: str) -> list[str]:
    """``/proc/PID/limits``'s hard limits, each with its name: they bound the process; a soft
    one it may raise to its hard one at will, and the CLI and the daemon raise the open-files
    one (a daemon keyed by soft limits would differ from the in-process path's for nothing)."""
    header, *rows = table.splitlines()
    soft, hard, units = (header.index(name) for name in ("Soft Limit", "Hard Limit", "Units"))
    return [f"{row[:soft].strip()}={row[hard:units].strip()}" for row in rows]


def code_files() -> list[str]:
    """Every module of the installed package, as ``path size mtime`` lines."""
    import isoagent  # the root package: parent/api in a checkout, isoagent/ when installed

    parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    top = os.path.dirname(parent)
    folders = [os.path.join(top, name) for name in ("parent", "child", "protocol")]
    lines = []
    root = os.path.dirname(os.path.abspath(isoagent.__file__ or ""))
    for folder, recurse in [(root, False), *((f, True) for f in folders)]:
        pending = [folder]
        while pending:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.name.endswith(".py") and entry.is_file():
                        info = entry.stat()
                        lines.append(f"{entry.path} {info.st_size} {info.st_mtime_ns}")
                    elif recurse and entry.is_dir() and entry.name != "__pycache__":
                        pending.append(entry.path)
    return sorted(lines)


def digest(environ: os._Environ[str] | dict[str, str]) -> str:
    """The digest that names this process's daemon for ``environ``."""
    parts = [
        f"wire {WIRE_VERSION}",
        sys.prefix,
        os.path.realpath(sys.executable),
        *sorted(f"{k}={v}" for k, v in configuration(environ).items()),
        *context(),
        *code_files(),
    ]
    return _sha256("\0".join(parts).encode("utf-8", "surrogateescape"))[:DIGEST_HEX]


_known: dict[tuple[tuple[str, str], ...], str] = {}  # by configuration: this process's


def daemon_address(environ: os._Environ[str] | dict[str, str] = os.environ) -> str:
    """The address, computed once per configuration in a process (the code it imported and
    its context do not change under it); a daemon's sessions inherit the daemon's."""
    config = tuple(sorted(configuration(environ).items()))
    if config not in _known:
        _known[config] = f"\0{PREFIX}{os.geteuid()}-{digest(environ)}"
    return _known[config]


def gateway_address(daemon: str) -> str:
    """The address of the model gateway that the daemon at ``daemon`` holds."""
    return daemon.replace(PREFIX, GATEWAY_PREFIX, 1)


def _sha256(data: bytes) -> str:
    """hashlib's sha256 without hashlib: its import (OpenSSL's bindings) costs more than
    the rest of the thin client's."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]  # Python 3.11
    except ImportError:
        from _sha2 import sha256  # type: ignore[import-not-found,no-redef]  # 3.12 and later
    return str(sha256(data).hexdigest())
