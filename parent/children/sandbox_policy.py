"""Which OS sandbox a child gets: read-only agents are read-only by the kernel, not by a prompt."""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import pwd
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from isoagent.child.agent.builtin_agents import writes
from isoagent.child.identity import allowed_environment
from isoagent.parent.records.run_folder import RUNS, state_dir
from isoagent.parent.settings import ChildNetwork, SandboxChoice, Settings
from isoagent.protocol import AgentSpec, SandboxPolicy
from isoagent.protocol.frames import SandboxMode


class SandboxRefused(Exception):
    """The agent needs a sandbox this machine cannot give, and unconfined was not allowed."""


@functools.cache
def landlock_available() -> bool:
    from isoagent.child.sandbox import landlock_abi

    return landlock_abi() > 0


def policy_for(agent: AgentSpec, settings: Settings, nested: Sequence[str] = ()) -> SandboxPolicy:
    """The sandbox of one child of ``agent``: what it may write (its mode), reach (network)
    and must leave alone in a writable workspace (protected; ``nested``: the repositories
    and ``.claude`` folders below the workspace's top; the settings' ``kept_files``).
    ``SandboxRefused`` when the machine cannot give the mode the agent needs."""
    mode = sandbox_mode(agent, settings.sandbox, settings.allow_unsandboxed)
    protected = protected_paths(
        mode, settings.workdir, settings.runs_dir, settings.writable_git, settings.add_dirs
    )
    if mode == "workspace" and mount_namespaces_available():
        kept = _existing(tuple(map(str, settings.kept_files)))
        protected += (*nested, *kept)
    return SandboxPolicy(
        mode=mode,
        network=settings.child_network == "host",
        proxy=settings.egress_socket if settings.child_network == "on" else "",
        protected=protected,
        hidden=hidden_paths(mode, settings),
        pid_namespace=mode != "off" and pid_namespaces_available(),
        local_fetch_hosts=settings.local_fetch_hosts,
        allowed_domains=settings.allowed_domains,
    )


# what no sandboxed child reads, under the user's home: keys, tokens, cloud credentials,
# shell histories (commands with secrets in them), shell start-up files (the exported
# ANTHROPIC_API_KEY, tokens in .bashrc)
DENY_READ = (
    ".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".config/gh", ".config/anthropic",
    ".claude/.credentials.json", ".docker", ".kube", ".netrc", ".git-credentials", ".npmrc",
    ".pypirc", ".bash_history", ".zsh_history", ".python_history", ".bashrc", ".bash_profile",
    ".bash_login", ".bash_logout", ".profile", ".zshrc", ".zshenv", ".zprofile", ".zlogin",
    ".zlogout", ".kshrc", ".mkshrc", ".cshrc", ".tcshrc", ".config/fish", ".local/share/fish",
    ".pam_environment", ".config/environment.d", ".psql_history", ".mysql_history",
    ".sqlite_history", ".node_repl_history", ".lesshst",
)  # fmt: skip

# what only root reads on a usual system (and a child running as root, even without
# capabilities: uid 0 passes the owner's read bits): password hashes, host keys, sudo
# rules, private TLS keys, the machine's Kerberos, VPN and Wi-Fi secrets, cluster admin
# credentials, cloud-init's user data, systemd's credentials, containers' file systems;
# each hidden where the child could read it
SYSTEM_SECRETS = (
    "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/security/opasswd",
    "/etc/sudoers", "/etc/sudoers.d", "/var/lib/sudo", "/var/db/sudo", "/etc/ssl/private",
    "/etc/pki/tls/private", "/etc/krb5.keytab", "/etc/ipsec.secrets", "/etc/ppp/chap-secrets",
    "/etc/ppp/pap-secrets", "/etc/wireguard", "/etc/NetworkManager/system-connections",
    "/etc/wpa_supplicant", "/etc/letsencrypt", "/etc/kubernetes", "/etc/rancher",
    "/var/lib/cloud/instances", "/var/spool/cron/crontabs", "/var/spool/cron/tabs",
    "/etc/credstore", "/etc/credstore.encrypted", "/run/credentials", "/var/lib/tailscale",
    "/var/lib/docker", "/var/lib/containerd", "/var/lib/kubelet",
)  # fmt: skip
SSH_HOST_KEYS = "/etc/ssh/ssh_host_*_key"
# where the system keeps its logs (root:adm 0640, journald's): hidden whole
SYSTEM_LOGS = ("/var/log",)
# where it keeps its state and configuration: each entry, up to STATE_DEPTH levels down, that
# a child of this user reads only by the owner's or the group's mode bits (what root or a
# group such as adm keeps from everyone else: 0600 keys, 0640 files, 0700 folders, which
# uid 0 without a capability, or a member of the group, still reads) is hidden; a home is
# not walked (DENY_READ is what is hidden there)
SYSTEM_STATE = (
    "/etc", "/var/lib", "/var/cache", "/var/spool", "/var/backups", "/var/mail", "/opt", "/srv",
    "/root",
)  # fmt: skip
STATE_DEPTH = 2


# the user's terminals: a child writing escape sequences to the CLI's /dev/pts/N would act
# on the user's screen and clipboard (it has no controlling terminal: /dev/tty is refused)
TERMINALS = Path("/dev/pts")


def hidden_paths(mode: SandboxMode, settings: Settings) -> tuple[str, ...]:
    """What a sandboxed child may not read: ``DENY_READ`` in the home (``$HOME``'s and the
    user's entry's in the password database), ``SYSTEM_SECRETS``, ``SYSTEM_LOGS`` and the
    private entries of ``SYSTEM_STATE`` it could read, the run folders (other runs'
    transcripts: the run's, the workspace's) and the user's state folder (its runs, the key
    that seals them, the workspace trust record), ``--deny-read``, the terminals; those
    that exist, less any that holds the workspace or an added folder (hiding it would hide
    the work)."""
    if mode == "off" or not mount_namespaces_available():
        return ()
    runs = (settings.runs_dir, settings.workdir / RUNS, state_dir())
    home = homes()
    candidates = _hidden_candidates(
        home, runs, settings.deny_read, settings.workdir, settings.add_dirs
    )
    return _existing(candidates) + _system_secrets(home, settings.workdir, settings.add_dirs)


def homes() -> tuple[str, ...]:
    """The user's home as ``$HOME`` says and as the password database does: a child
    started with another ``HOME`` must not find the real one open."""
    return tuple(dict.fromkeys((str(Path.home()), *_passwd_home())))


@functools.cache
def _passwd_home() -> tuple[str, ...]:
    try:
        return (pwd.getpwuid(os.getuid()).pw_dir,)
    except KeyError:  # a uid without an entry (a container's)
        return ()


@functools.lru_cache(maxsize=8)
def _hidden_candidates(
    homes: tuple[str, ...],
    runs: tuple[Path, ...],
    deny_read: tuple[Path, ...],
    workdir: Path,
    add_dirs: tuple[Path, ...],
) -> tuple[str, ...]:
    tops = [str(Path(home)).rstrip("/") for home in homes]  # "/" as "": "/.ssh"
    paths = [f"{top}/{name}" for top in tops for name in DENY_READ]  # a Path each: 2 ms
    paths += map(str, (*runs, *deny_read, TERMINALS))
    work = (workdir, *add_dirs)
    return tuple(dict.fromkeys(path for path in paths if not _holds_any(path, work)))


def _holds_any(path: str | Path, work: tuple[Path, ...]) -> bool:
    """Whether ``path`` is or holds a folder of ``work``: hiding it would hide the work.
    By name, as ``Path.is_relative_to``, on strings: a ``Path`` costs 30 us, and a session
    asks this of some hundred paths."""
    top = str(path).rstrip("/") + "/"
    return any(f"{place}/".startswith(top) for place in work)


def _in_any(path: str, work: tuple[Path, ...]) -> bool:
    """Whether ``path`` is in a folder of ``work`` (or is one), by name, as ``_holds_any``."""
    return any(f"{path}/".startswith(f"{place}/") for place in work)


# how long a walk of the system's secrets serves: the daemon's sessions and a long run's
# children share one; a secret made since is as open to the next child as it is to every
# child started before it (each child's mounts are fixed as it starts)
SYSTEM_WALK_SECONDS = 10.0


def _system_secrets(
    homes: tuple[str, ...], workdir: Path, add_dirs: tuple[Path, ...]
) -> tuple[str, ...]:
    """Those of ``SYSTEM_SECRETS``, ``SYSTEM_LOGS`` and the ssh host keys a child of this
    user could read (or search, a folder) without any capability, and the private entries
    of ``SYSTEM_STATE`` outside ``homes`` (``_Walk``), less any that holds the workspace or
    an added folder (``-C /etc/kubernetes``) or, a state entry, is in one."""
    work = (workdir, *add_dirs)
    walk = _Walk.recent()
    found = [path for path in walk.readable if not _holds_any(path, work)]
    found += [
        path
        for top in SYSTEM_STATE
        if top not in homes
        for path in walk.private[top]
        if not _in_any(path, work) and not _holds_any(path, work)
    ]
    return tuple(dict.fromkeys(found))


@dataclasses.dataclass(frozen=True)
class _Walk:
    """What a child of this process's user could read of the system's secrets, as found at
    ``at`` (``time.monotonic``): a walk of the state folders costs about 10 ms, so it is
    made at most once every ``SYSTEM_WALK_SECONDS`` (the daemon makes it before it forks a
    session, which inherits it)."""

    at: float
    readable: tuple[str, ...]  # of SYSTEM_SECRETS, SYSTEM_LOGS and the ssh host keys
    private: dict[str, tuple[str, ...]]  # each of SYSTEM_STATE: its private entries

    _last: ClassVar[_Walk | None] = None

    @classmethod
    def recent(cls) -> _Walk:
        now = time.monotonic()
        last = cls._last
        if last is None or now - last.at >= SYSTEM_WALK_SECONDS:
            reader = _Reader(os.getuid(), frozenset({os.getgid(), *os.getgroups()}))
            listed = (*SYSTEM_SECRETS, *SYSTEM_LOGS, *sorted(glob.glob(SSH_HOST_KEYS)))
            readable = tuple(path for path in listed if reader.reads(path))
            private = {top: tuple(reader.private_entries(top)) for top in SYSTEM_STATE}
            last = cls._last = cls(now, readable, private)
        return last


def walk_system_secrets() -> None:
    """Make ``_Walk``'s walk now unless a recent one serves (or nothing could be hidden)."""
    if mount_namespaces_available():
        _Walk.recent()


@dataclasses.dataclass(frozen=True)
class _Reader:
    """What a child of a user (its uid and groups) reads by mode bits, the capability
    sets empty."""

    uid: int
    groups: frozenset[int]

    def reads(self, path: str) -> bool:
        try:
            st = os.stat(path)
        except OSError:
            return False
        wanted = 0o5 if stat.S_ISDIR(st.st_mode) else 0o4
        return bool(st.st_mode >> self._shift(st) & wanted)

    def _shift(self, st: os.stat_result) -> int:
        """Which mode bits apply to this user: the owner's (6), the group's (3), others' (0)."""
        return 6 if st.st_uid == self.uid else 3 if st.st_gid in self.groups else 0

    def private_entries(self, top: str) -> list[str]:
        """The entries under ``top``, ``STATE_DEPTH`` levels down, that this user reads (a
        file with something in it) or opens (a folder, whole) only by the owner's or the
        group's bits; links are not followed, folders others may open are walked."""
        found, stack = [], [(top, 1)]
        while stack:
            folder, depth = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                is_folder = stat.S_ISDIR(st.st_mode)
                wanted = 0o5 if is_folder else 0o4
                if st.st_mode & wanted == wanted:  # others' too: nothing to hide here
                    if is_folder and depth < STATE_DEPTH:
                        stack.append((entry.path, depth + 1))
                    continue
                if not (is_folder or stat.S_ISREG(st.st_mode)):
                    continue
                if st.st_mode >> self._shift(st) & wanted == wanted and (is_folder or st.st_size):
                    found.append(entry.path)
        return found


def _existing(paths: tuple[str, ...]) -> tuple[str, ...]:
    """Those of ``paths`` that exist now. Asked for each child: a path may come (a user's
    new ``~/.aws``) or go during a run; the candidates, a few dozen path operations, are
    computed once (``lru_cache``)."""
    return tuple(path for path in paths if os.path.exists(path))


def sandbox_mode(
    agent: AgentSpec, choice: SandboxChoice, allow_unsandboxed: bool, landlock: bool | None = None
) -> SandboxMode:
    """``auto``: agents without write tools get ``read-only``, the others ``workspace``.

    ``landlock``: whether the kernel can sandbox (default: ask it).
    """
    if choice == "off":
        return "off"
    mode: SandboxMode = (
        choice if choice != "auto" else "workspace" if writes(agent) else "read-only"
    )
    if landlock_available() if landlock is None else landlock:
        return mode
    if allow_unsandboxed or (choice == "auto" and mode == "workspace"):
        return "off"
    raise SandboxRefused(
        f"agent {agent.name} must run {mode} but this kernel has no Landlock; "
        "pass --allow-unsandboxed to run it unconfined, or --sandbox off"
    )


def unsandboxed_warning(choice: SandboxChoice) -> str | None:
    """The once-per-run warning when children will run without the kernel sandbox."""
    if choice == "off" or landlock_available():
        return None
    return (
        "warning: Landlock is not available on this kernel: children cannot be sandboxed; "
        "read-only agents are refused unless --allow-unsandboxed is given"
    )


# inside a writable workspace, kept read-only: hooks and config run later, unsandboxed;
# agent files and settings decide what the next agents may do; the run's own records
PROTECTED = (".git", ".claude", ".isoagent")
INTERPRETER = Path(os.path.realpath(sys.prefix))  # the environment isoagent runs from
_CAP_SYS_ADMIN = 21


# a mount and a pid namespace of its own (in a user namespace, as a child not running as
# root makes them), and there, from pid 1, a fresh /proc: 0; 1: no mount namespace; 2: a
# mount namespace but no pid namespace or /proc (a container's masked /proc refuses one)
_PROBE = """
import ctypes, os, sys
libc = ctypes.CDLL(None)
NS, PID, USER = 0x00020000, 0x20000000, 0x10000000
if libc.unshare(NS | PID) != 0 and libc.unshare(USER | NS | PID) != 0:
    sys.exit(2 if libc.unshare(NS) == 0 or libc.unshare(USER | NS) == 0 else 1)
child = os.fork()
if child == 0:
    private = libc.mount(None, b"/", None, 0x44000, None) == 0
    os._exit(0 if private and libc.mount(b"proc", b"/proc", b"proc", 14, None) == 0 else 2)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
"""


@functools.cache
def _namespaces() -> int:
    """What namespaces a child can have (``_PROBE``'s answer), asked of a short-lived
    process once: a system or a container's seccomp profile may refuse any of them."""
    try:
        probe = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _PROBE],
            env=allowed_environment(),
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return 1
    return probe.returncode if probe.returncode in (0, 2) else 1


@functools.cache
def mount_namespaces_available() -> bool:
    """Whether a child can have a mount namespace of its own: as root with CAP_SYS_ADMIN,
    or in an unprivileged user namespace (``_namespaces``)."""
    try:
        status = dict(
            line.split(":\t", 1) for line in Path("/proc/self/status").read_text().splitlines()
        )
        if int(status.get("CapEff", "0"), 16) >> _CAP_SYS_ADMIN & 1:
            return True
    except (OSError, ValueError):
        return False
    return _namespaces() != 1


def pid_namespaces_available() -> bool:
    """Whether a child can have a pid namespace of its own and its own ``/proc`` in it."""
    return mount_namespaces_available() and _namespaces() == 0


def protected_paths(
    mode: SandboxMode,
    workdir: Path,
    runs_dir: Path,
    writable_git: bool,
    add_dirs: tuple[Path, ...] = (),
) -> tuple[str, ...]:
    """The existing folders of the workspace and of each added folder a ``workspace``-mode
    child gets read-only (``PROTECTED``, less ``.git`` with ``writable_git``; the run
    folders' parent when it is in the workspace; the environment isoagent runs from, when
    it is in one of them: a ``.pth`` or a changed module there would run in the next
    invocation, with the key); none where there is no mount namespace (said once, by
    ``protection_warning``, as for ``hidden_paths``)."""
    if mode != "workspace" or not mount_namespaces_available():
        return ()
    return _existing(_protected_candidates(workdir, runs_dir, writable_git, add_dirs))


@functools.lru_cache(maxsize=8)
def _protected_candidates(
    workdir: Path, runs_dir: Path, writable_git: bool, add_dirs: tuple[Path, ...]
) -> tuple[str, ...]:
    names = [name for name in PROTECTED if not (writable_git and name == ".git")]
    roots = (workdir, *add_dirs)
    paths = [root / name for root in roots for name in names]
    if any(INTERPRETER.is_relative_to(root) for root in roots):
        paths.append(INTERPRETER)
    records = runs_dir.parent  # in the workspace, or the project's above it in an added folder
    writable = any(records.is_relative_to(root) for root in roots)
    if writable and records not in roots and records not in paths:
        paths.append(records)
    return tuple(str(path) for path in paths)


def protection_warning(choice: SandboxChoice) -> str | None:
    """The once-per-run warning when children cannot get protected or hidden paths, or a
    ``/proc`` of their own."""
    if choice == "off" or pid_namespaces_available():
        return None
    if mount_namespaces_available():
        return (
            "warning: no pid namespace or /proc of their own for children here: they can "
            "read every process's command line in /proc"
        )
    gaps = ["every agent can read ~/.ssh, ~/.aws, ~/.netrc, the run folders, --deny-read's"]
    if choice != "read-only":
        gaps.insert(0, "writing agents can change .git, .claude and .isoagent in the workspace")
    gaps.append("every process's command line in /proc")
    return f"warning: no mount namespace for children here: {'; '.join(gaps)}"


def mechanism_warnings(
    choice: SandboxChoice, network: bool, abi: int | None = None, filters: bool | None = None
) -> list[str]:
    """Once per run: the weaker isolation this kernel or machine gives than the README says.
    ``abi``, ``filters``: the Landlock ABI, whether seccomp filters (default: ask)."""
    from isoagent.child.sandbox import landlock_abi, seccomp

    warnings = []
    abi = landlock_abi() if abi is None else abi
    if choice != "off" and 0 < abi < 6:
        warnings.append(
            f"warning: Landlock ABI {abi} here (scopes need 6): sandboxed children can still "
            "signal processes and reach abstract Unix sockets outside their sandbox"
        )
    if not network and not (seccomp.available() if filters is None else filters):
        warnings.append(
            "warning: no seccomp filter for this architecture: children without network "
            "can still connect to path-named Unix sockets"
        )
    if warning := protection_warning(choice):
        warnings.append(warning)
    return warnings


def network_warning(network: ChildNetwork) -> str | None:
    """The once-per-run warning when children reach the network past any allow-list."""
    if network != "host":
        return None
    return (
        "warning: --child-network host: children reach the host's network directly, past "
        "any allow-list: what they read can leave"
    )
