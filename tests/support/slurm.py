"""A one-node Slurm cluster in a temporary folder, for tests: munged, slurmctld and
slurmd with their own key, config, ports, state and logs (the README's recipe).

``unavailable()`` says why this machine cannot run one (tests skip with it), or ``""``.
``SLURM_CONF`` must name ``cluster.conf`` for ``srun`` to find the cluster
(``cluster.env()``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.support.messages_server import free_port

PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "sinfo")


def unavailable() -> str:
    missing = [name for name in PROGRAMS if shutil.which(name) is None]
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} missing; Debian: "
            "apt-get install slurmd slurmctld slurm-client munge)"
        )
    if os.geteuid() != 0:
        return "a one-node Slurm cluster needs root (slurmd starts jobs as their user)"
    return ""


class MiniSlurm:
    def __init__(self, folder: Path, cpus: int = 2, oversubscribe: int = 8) -> None:
        self.folder = folder
        self.node = socket.gethostname()
        for part in ("munge", "state", "spool", "log"):
            (folder / part).mkdir(parents=True, exist_ok=True)
        (folder / "munge").chmod(0o711)
        key = folder / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.socket = folder / "munge" / "socket"
        self.conf = folder / "cluster.conf"
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=isoagent-test",
                    f"SlurmctldHost={self.node}(127.0.0.1)",
                    f"SlurmctldPort={free_port()}",
                    f"SlurmdPort={free_port()}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={self.socket}",
                    f"StateSaveLocation={folder / 'state'}",
                    f"SlurmdSpoolDir={folder / 'spool'}",
                    f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
                    f"SlurmdPidFile={folder / 'slurmd.pid'}",
                    f"SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={folder / 'log' / 'slurmd.log'}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core",
                    "SchedulerType=sched/builtin",
                    "MpiDefault=none",
                    "ReturnToService=2",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
                    "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
                    f"OverSubscribe=FORCE:{oversubscribe}",
                    "",
                ]
            )
        )
        self.processes: list[subprocess.Popen[bytes]] = []

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return {**base, "SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 60.0) -> None:
        log = self.folder / "log"
        munge = self.folder / "munge"
        self._daemon(
            [
                "munged", "-F", "-f", f"--socket={self.socket}",
                f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'pid'}",
                f"--seed-file={munge / 'seed'}", f"--log-file={log / 'munged.log'}",
            ],
            "munged",
        )  # fmt: skip
        self._wait(self.socket.exists, timeout, "munged did not make its socket")
        self._daemon(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._daemon(["slurmd", "-D", "-f", str(self.conf)], "slurmd")
        self._wait(self._idle, timeout, "the node did not become idle")

    def _daemon(self, argv: list[str], name: str) -> None:
        out = (self.folder / "log" / f"{name}.out").open("wb")
        self.processes.append(
            subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(dict(os.environ)),
                start_new_session=True,
            )
        )
        out.close()

    def _idle(self) -> bool:
        done = subprocess.run(
            ["sinfo", "-h", "-o", "%t"],
            env=self.env(dict(os.environ)),
            capture_output=True,
            text=True,
        )
        return done.returncode == 0 and done.stdout.strip() in ("idle", "mix", "alloc")

    def _wait(self, condition: object, timeout: float, why: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.processes):
                break
            if condition():  # type: ignore[operator]
                return
            time.sleep(0.1)
        logs = "; ".join(
            f"{p.name}: {p.read_text(errors='replace')[-300:]}"
            for p in sorted((self.folder / "log").glob("*.out"))
        )
        raise RuntimeError(f"{why}: {logs}")

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()
