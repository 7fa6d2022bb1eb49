"""A cgroup per child: limits that bind root, and an end that nothing the child started escapes.

RLIMIT_NPROC does not bind root, and a process can leave its session and drop its
environment; it cannot leave its cgroup (the child and its commands have no
capability, and Landlock keeps them from writing under /sys/fs/cgroup). Each local
child is moved into cgroups of its own before it takes its Task, so all it starts
is born inside them:

- cgroup v2 (any controllers): ``cgroup.kill`` ends every process in it at once;
  ``pids.max`` and ``memory.max`` where those controllers are enabled;
- cgroup v1 ``pids`` and ``memory`` hierarchies: ``pids.max``,
  ``memory.limit_in_bytes`` (and, without v2, the process list to end).

What is there is found at run time, below this process's own cgroups; what is
missing is said once on stderr, and the caller falls back to walking the process tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

END_TIMEOUT = 5.0  # seconds for a killed cgroup to empty
# the files a child's folder may have, by the kernel's version and its controllers: the
# same in every child of a hierarchy, so looked for once
_OPTIONAL = ("pids.max", "memory.max", "memory.limit_in_bytes", "cgroup.kill")


def _mounts() -> dict[str, tuple[Path, str]]:
    """The mounted hierarchies this process can use: "v2", "pids", "memory" -> (mount
    point, the mount's root within the hierarchy)."""
    found: dict[str, tuple[Path, str]] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields, _, rest = line.partition(" - ")
        parts, extra = fields.split(), rest.split()
        if len(parts) < 5 or len(extra) < 3:
            continue
        root, point, fstype = parts[3], Path(parts[4]), extra[0]
        if fstype == "cgroup2":
            found.setdefault("v2", (point, root))
        elif fstype == "cgroup":
            for controller in ("pids", "memory"):
                if controller in extra[2].split(","):
                    found.setdefault(controller, (point, root))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup in each hierarchy: "v2", "pids", "memory" -> path."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            number, controllers, path = line.split(":", 2)
            if number == "0" and not controllers:
                paths["v2"] = path
            for controller in ("pids", "memory"):
                if controller in controllers.split(","):
                    paths[controller] = path
    return paths


def _write(path: Path, value: str) -> None:
    with open(path, "w") as file:
        file.write(value)


def _remove_stale(folder: Path) -> None:
    """Remove the empty cgroups of runs whose process is gone (killed with SIGKILL)."""
    for run in folder.glob("isoagent-*"):
        pid = run.name.removeprefix("isoagent-")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _remove_run(run)


def _remove_run(run: Path) -> None:
    """Remove a run's folder and its children's, those that are empty."""
    for folder in [*run.glob("child-*"), run]:
        with contextlib.suppress(OSError):
            folder.rmdir()


@dataclass
class ChildCgroup:
    """One child's cgroup folders; ``end`` kills all they hold and hands them back, empty,
    for the next child."""

    folders: list[Path]
    kill: Path | None  # cgroup.kill, where there is one
    procs: Path  # a cgroup.procs listing every process of the child's
    spare: Callable[[ChildCgroup], None]  # takes the folders back once they are empty

    def pids(self) -> list[int]:
        try:
            return [int(pid) for pid in self.procs.read_text().split()]
        except (OSError, ValueError):
            return []

    async def end(self) -> bool:
        """SIGKILL every process in the cgroup (``cgroup.kill``, or pass after pass over its
        process list), wait until it is empty, hand it back; False when it would not empty
        within ``END_TIMEOUT`` (it is then kept from every other child)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + END_TIMEOUT
        if self.kill is not None:
            with contextlib.suppress(OSError):
                _write(self.kill, "1")
        while pids := self.pids():
            if self.kill is None:
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.01)
        self.spare(self)
        return True


@dataclass
class RunCgroups:
    """Where this run's children's cgroups go: ``isoagent-<pid>`` below this process's own
    cgroup, in each hierarchy that lets it create one.

    A child's folders, once it ended and they are empty, are the next child's: in each
    hierarchy that spares a ``mkdir``, a ``rmdir`` and the limit's write, 0.2 ms of CPU.
    Nothing of a process is left in an empty cgroup; in a cgroup v1 ``memory`` one, the
    page cache the last child's reads brought in stays charged to it, and is reclaimed
    from it first when the next child nears the limit. Folders keep their first child's name.
    """

    roots: dict[str, Path] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    # by hierarchy: which of _OPTIONAL a child's folder has
    _present: dict[str, frozenset[str]] = field(default_factory=dict)
    # emptied children's cgroups, by their limits (max_processes, memory_mb)
    _spares: dict[tuple[int, int], list[ChildCgroup]] = field(default_factory=dict)

    @classmethod
    def open(cls) -> RunCgroups:
        """Find the hierarchies; say once on stderr what a child will run without."""
        cgroups = cls()
        mounts, own = _mounts(), _own_paths()
        for kind, (point, mount_root) in mounts.items():
            path = own.get(kind)
            if path is None or not path.startswith(mount_root):
                continue
            relative = path[len(mount_root) :].strip("/")
            run = point / relative / f"isoagent-{os.getpid()}"
            if os.access(run.parent, os.W_OK):
                cgroups.roots[kind] = run
                _remove_stale(run.parent)
        cgroups.missing = cgroups._missing()
        if cgroups.missing:
            print(
                f"isoagent: note: children run without {', '.join(cgroups.missing)} "
                "(no cgroup this process may create); what they start is found through "
                "the process tree instead",
                file=sys.stderr,
            )
        return cgroups

    def _missing(self) -> list[str]:
        missing = []
        if "v2" not in self.roots:
            missing.append("a cgroup v2 to end them (cgroup.kill)")
        if not self._has_v2("pids") and "pids" not in self.roots:
            missing.append("a pids cgroup (process limit for root)")
        if not self._has_v2("memory") and "memory" not in self.roots:
            missing.append("a memory cgroup (memory limit for all their processes)")
        return missing

    def _has_v2(self, controller: str) -> bool:
        """Whether the run's v2 folder gets ``controller`` (its parent hands it down)."""
        run = self.roots.get("v2")
        if run is None:
            return False
        with contextlib.suppress(OSError):
            return controller in (run.parent / "cgroup.subtree_control").read_text().split()
        return False

    def _make_run_folder(self, kind: str, run: Path) -> None:
        """The run's folder; in v2, one that hands pids and memory down to its children."""
        if run.is_dir():
            return
        run.mkdir(exist_ok=True)
        if kind == "v2":
            wanted = [f"+{c}" for c in ("pids", "memory") if self._has_v2(c)]
            if wanted:
                _write(run / "cgroup.subtree_control", " ".join(wanted))

    def _has(self, kind: str, folder: Path, name: str) -> bool:
        """Whether ``folder``, a child's in hierarchy ``kind``, has the file ``name``."""
        if kind not in self._present:
            self._present[kind] = frozenset(n for n in _OPTIONAL if (folder / n).exists())
        return name in self._present[kind]

    def close(self) -> None:
        """Remove the children's empty folders and the run's (a child's that would not empty
        keeps its run's folder too; so does another session of this process still using it)."""
        self._spares.clear()
        for run in self.roots.values():
            _remove_run(run)

    def join(
        self, name: str, pid: int, max_processes: int = 0, memory_mb: int = 0
    ) -> ChildCgroup | None:
        """Move ``pid`` into a cgroup ``name`` of its own in each hierarchy, with its limits
        (0: none), or an emptied one of an earlier child with the same limits; None when
        there is no hierarchy, or the move failed (said on stderr)."""
        limits = (max_processes, memory_mb)
        spares = self._spares.setdefault(limits, [])
        if spares:
            return self._rejoin(spares.pop(), name, pid)
        folders: list[Path] = []
        try:
            for kind, run in self.roots.items():
                if not self._needed(kind, max_processes, memory_mb):
                    continue
                self._make_run_folder(kind, run)
                folder = run / name
                folder.mkdir()
                folders.append(folder)
                self._limit(kind, folder, max_processes, memory_mb)
                _write(folder / "cgroup.procs", str(pid))
        except OSError as exc:
            print(f"isoagent: cannot put child {name} in a cgroup: {exc}", file=sys.stderr)
            for folder in folders:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            return None
        if not folders:
            return None
        v2 = self.roots.get("v2")
        kill = v2 / name / "cgroup.kill" if v2 is not None else None
        if kill is not None and not self._has("v2", kill.parent, kill.name):
            kill = None  # before Linux 5.14
        return ChildCgroup(folders, kill, folders[0] / "cgroup.procs", spares.append)

    def _rejoin(self, cgroup: ChildCgroup, name: str, pid: int) -> ChildCgroup | None:
        try:
            for folder in cgroup.folders:
                _write(folder / "cgroup.procs", str(pid))
        except OSError as exc:  # the child is gone already, say
            print(f"isoagent: cannot put child {name} in a cgroup: {exc}", file=sys.stderr)
            if not cgroup.pids():
                cgroup.spare(cgroup)
            return None
        return cgroup

    def _needed(self, kind: str, max_processes: int, memory_mb: int) -> bool:
        """A v1 hierarchy beside a v2 one only holds its limit: without that limit, the
        child's cgroup there (three more folder operations, each a kernel cgroup) is spared."""
        if kind == "v2" or "v2" not in self.roots:
            return True
        return max_processes > 0 if kind == "pids" else memory_mb > 0

    def _limit(self, kind: str, folder: Path, max_processes: int, memory_mb: int) -> None:
        if max_processes > 0 and kind in ("v2", "pids") and self._has(kind, folder, "pids.max"):
            _write(folder / "pids.max", str(max_processes))
        if memory_mb > 0:
            for name in ("memory.max", "memory.limit_in_bytes"):
                if kind in ("v2", "memory") and self._has(kind, folder, name):
                    _write(folder / name, str(memory_mb << 20))
