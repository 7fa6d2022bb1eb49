"""A real OpenSSH server on 127.0.0.1 for tests, with its own config, keys and port.

``Sshd(folder)`` writes a host key, a user key authorized for the current user, an
``sshd_config`` and an ``ssh_config`` into ``folder``, and starts ``sshd -D`` (in the
foreground: the test owns the process and ends it). ``unavailable()`` says why this
machine cannot run one (the tests skip with that reason), or ``""``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.support.messages_server import free_port

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")  # Debian's sshd refuses to start as root without it


def unavailable() -> str:
    if not os.access(SSHD, os.X_OK):
        return "sshd is not installed (Debian: apt-get install openssh-server)"
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return "the OpenSSH client is not installed (Debian: apt-get install openssh-client)"
    if os.geteuid() == 0 and not PRIVSEP_DIR.is_dir():
        try:
            PRIVSEP_DIR.mkdir(mode=0o755)
        except OSError as exc:
            return f"sshd needs {PRIVSEP_DIR}, which cannot be made: {exc.strerror}"
    return ""


class Sshd:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log = folder / "sshd.log"
        for name in ("host_key", "user_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)],
                check=True,
            )
        authorized = folder / "authorized_keys"
        authorized.write_text((folder / "user_key.pub").read_text())
        authorized.chmod(0o600)
        self.config = folder / "sshd_config"
        self.config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\n"
            f"PidFile none\nAuthorizedKeysFile {authorized}\nStrictModes no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "PermitRootLogin prohibit-password\nMaxSessions 64\nMaxStartups 64\n"
            "LogLevel VERBOSE\n"
        )
        self.client_config = folder / "ssh_config"
        self.client_config.write_text(
            f"Host *\n  Port {self.port}\n  IdentityFile {folder / 'user_key'}\n"
            f"  IdentitiesOnly yes\n  StrictHostKeyChecking no\n"
            f"  UserKnownHostsFile {folder / 'known_hosts'}\n  BatchMode yes\n"
            "  LogLevel ERROR\n  ConnectTimeout 10\n"
        )
        self.process: subprocess.Popen[bytes] | None = None

    def launcher(self) -> str:
        """A ``--launcher`` template that reaches this server."""
        return f"ssh -F {self.client_config} -T {{host}} --"

    def start(self, timeout: float = 20.0) -> None:
        self.process = subprocess.Popen(
            [SSHD, "-D", "-f", str(self.config), "-E", str(self.log)],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited: {self.log.read_text()[-500:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    def accepted_logins(self) -> int:
        """How many connections authenticated (each plain ``ssh`` is one; sessions over a
        control master are not)."""
        return self.log.read_text().count("Accepted publickey")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
