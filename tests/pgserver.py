"""A real PostgreSQL server for the test session: Debian's postgresql binaries, a throwaway
cluster in a temporary folder, a fresh database per test.

Why Debian's server and not pgserver from PyPI: pgserver's last release is from 2024 and
bundles its own build; Debian's PostgreSQL 15 is what our users' clusters run, `.ci/run`
installs it with apt when it is missing, and it can be stopped and started mid-study
(the outage tests need exactly that). PostgreSQL refuses to run as root: as root the
cluster belongs to the `postgres` system user that the Debian package creates.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path


def find_bindir() -> Path | None:
    for pg_ctl in [shutil.which("pg_ctl"), *sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                                                  reverse=True)]:
        if pg_ctl and Path(pg_ctl).is_file():
            return Path(os.path.realpath(pg_ctl)).parent
    return None


def _free_port() -> int:
    """A free port below the kernel's ephemeral range: the outage tests stop and start the
    server on its port, and a port the kernel hands out (bind to 0, a client connection's
    own end) could be taken meanwhile by another test worker's connection."""
    import random

    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for port in random.sample(range(max(1024, low - 12000), low), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """initdb + pg_ctl start/stop on 127.0.0.1 with trust authentication."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="mpiopt-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = _free_port()
        self.user = None
        if os.geteuid() == 0:
            self.user = "postgres"
            entry = pwd.getpwnam(self.user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "mpiopt", "-E", "UTF8",
                  "--no-sync")
        self.start()

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.bindir / tool), *args]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, cwd=self.dir)

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def start(self) -> None:
        """Start the server (again, after stop()); a no-op while it runs."""
        if self.running():
            return
        options = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    @contextmanager
    def frozen(self):
        """The server stopped in its tracks (SIGSTOP to the postmaster and every backend):
        its connections stay open and the kernel still acknowledges their packets, as for
        a paused virtual machine or a hung disk under the server; SIGCONT at the end."""
        from mpiopt.objective.processes import descendants

        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGSTOP)     # first: a stopped postmaster forks no more
        pids = [postmaster]
        try:
            for pid in descendants(postmaster):
                try:                            # (a backend may exit between list and kill)
                    os.kill(pid, signal.SIGSTOP)
                    pids.append(pid)
                except ProcessLookupError:
                    pass
            yield
        finally:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://mpiopt@127.0.0.1:{self.port}/postgres"

    def new_database(self) -> str:
        """A fresh, empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=mpiopt dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://mpiopt@127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
