"""OS-enforced restrictions a child applies to itself before it runs any tool.

All of it is inherited by everything the child later forks or execs (the ``Bash``
tool included); ``confine`` applies it in the order the kernel needs:

- ``namespaces``: a network namespace (no network), a mount namespace (sandboxed), a pid
  namespace (``pids``: the process forks, and goes on as pid 1 of it);
- ``egress``: with ``policy.proxy``, a listener on loopback handed to the parent's proxy;
- ``mounts``: a ``/proc`` of its own pid namespace, a private ``/dev/shm``, only the usual
  devices, protected folders read-only, hidden ones covered;
- ``limits``: rlimits on CPU time, address space, processes, file size, open files;
- ``privileges``: not dumpable, a subreaper, no capability, ``no_new_privs``;
- ``seccomp``: no Unix-domain socket of its own (sandboxed, or without network);
- ``landlock``: read everywhere, write only under the tmpdir (and the workspace and
  the added folders).

Namespaces, seccomp, capabilities and Landlock bind the calling thread only: call
``confine`` from the main thread before any other thread starts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from isoagent.child.sandbox import egress, mounts, seccomp
from isoagent.child.sandbox.landlock import apply_sandbox, landlock_abi
from isoagent.child.sandbox.limits import apply_limits
from isoagent.child.sandbox.namespaces import (
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    disable_network,
    enter_namespaces,
)
from isoagent.child.sandbox.pids import become_init
from isoagent.child.sandbox.privileges import (
    become_subreaper,
    drop_capabilities,
    lock_privileges,
    make_undumpable,
)
from isoagent.child.sandbox.syscalls import SandboxError
from isoagent.protocol import Limits, SandboxPolicy

__all__ = [
    "SandboxError",
    "apply_limits",
    "apply_sandbox",
    "become_subreaper",
    "confine",
    "disable_network",
    "landlock_abi",
    "lock_privileges",
    "make_undumpable",
]


def confine(
    policy: SandboxPolicy,
    limits: Limits,
    workspace: Path,
    tmpdir: Path,
    add_dirs: Sequence[Path] = (),
) -> None:
    """Everything ``policy`` and ``limits`` ask for. The process always ends up not
    dumpable, a subreaper, without capabilities and with ``no_new_privs``.

    ``add_dirs`` (``--add-dir``) get the workspace's access.
    Sandboxed, it tries a mount namespace for a private ``/dev/shm``; without one,
    ``/dev/shm`` is not writable, and ``policy.protected`` (folders the parent expects
    read-only), ``policy.hidden`` and ``policy.pid_namespace`` cannot be honoured: that
    is an error, never a silent downgrade. With ``policy.pid_namespace`` a process that is
    not pid 1 already (the fork server makes its children so: ``pids.fork_as_init``)
    forks, and only the fork returns (``pids.become_init``).
    """
    sandboxed = policy.mode != "off"
    network = 0 if policy.network else CLONE_NEWNET
    own_pids = sandboxed and policy.pid_namespace
    fork = CLONE_NEWPID if own_pids and os.getpid() != 1 else 0
    mounted = sandboxed
    try:
        enter_namespaces(network | (CLONE_NEWNS | fork if sandboxed else 0))
    except SandboxError:
        if not sandboxed or policy.protected or policy.hidden or own_pids:
            raise
        enter_namespaces(network)
        mounted = False
    if policy.proxy:  # before the mounts, which may cover where its socket is, and from
        try:  # the process the parent started: the proxy knows it by its pid
            os.environ.update(egress.hand_over(policy.proxy))
        except OSError as exc:
            raise SandboxError(f"cannot reach the parent's egress proxy: {exc}") from exc
    if fork:
        become_init()
    shm = False
    if mounted:
        mounts.make_private()
        if own_pids:
            mounts.fresh_proc()
        places = (workspace, tmpdir, *add_dirs)
        under = [p for p in places if p.is_relative_to(mounts.SHM) and p != Path(mounts.SHM)]
        shm = mounts.private_shm([str(p) for p in under])
        mounts.usual_devices_only()
        for path in policy.protected:
            if os.path.exists(path):
                mounts.read_only(path)
        for path in policy.hidden:
            if os.path.exists(path):
                mounts.hide(path)
    apply_limits(
        limits.cpu_seconds, limits.address_space_mb, limits.max_processes, limits.file_size_mb
    )
    make_undumpable()
    become_subreaper()
    drop_capabilities()
    if (sandboxed or not policy.network) and seccomp.available():
        seccomp.forbid_unix_sockets()  # an ssh-agent, a Docker daemon: with network or not
    if sandboxed:
        apply_sandbox(policy.mode, workspace, tmpdir, shm=shm, add_dirs=add_dirs)
