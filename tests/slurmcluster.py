"""A real one-node Slurm cluster for the test session: Debian's slurm-wlm and munge, every
daemon on 127.0.0.1 in a temporary folder, nothing configured system-wide.

munged runs on its own socket with a fresh key; slurmctld and slurmd read a slurm.conf
written here (free ports, their own state and spool folders, `SLURM_CONF` points at it).
Process tracking is proctrack/linuxproc and task/none, so neither cgroups nor a system
service is needed. The node declares more CPUs than the machine has (config_overrides): the
test jobs sleep most of the time, and an array of three 3-rank jobs must run side by side on
two cores. MpiDefault=pmi2 is what a site sets for MPICH: `srun` then starts the ranks of
the venv's MPICH wheel as one MPI world.

Every daemon runs in the foreground as our child (`-D`, `-F`), and every process that the
cluster started carries this cluster's SLURM_CONF in its environment (slurmd passes it to
slurmstepd, sbatch passes it to the job): close() cancels the jobs, stops the daemons and
then ends any process still carrying it, so nothing outlives the session, failed or not.
"""
from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from pgserver import _free_port

DAEMONS = ("munged", "slurmctld", "slurmd")
COMMANDS = ("sbatch", "scontrol", "scancel", "squeue", "srun")
NODE_CPUS = 12
# A job step's credential lifetime, and so how long a requeued job waits before it may
# start again (Slurm's default is 120 s): long enough for a step to start on a loaded machine.
CRED_EXPIRE_S = 20


class SlurmUnavailable(Exception):
    """Slurm cannot run on this machine: which daemon, and what it said."""


def missing_binaries() -> list[str]:
    return [name for name in DAEMONS + COMMANDS if shutil.which(name, path=_search_path()) is None]


def _search_path() -> str:
    """The daemons live in sbin, which a non-root PATH may lack."""
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


class SlurmCluster:
    """munged + slurmctld + slurmd on localhost; `env()` is what a client command needs."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="mpiopt-slurm-"))
        os.chmod(self.dir, 0o711)                 # munged wants its socket's folders a+x
        self.conf = self.dir / "slurm.conf"
        self.socket = self.dir / "munge" / "munge.socket"
        self.host = socket.gethostname().split(".")[0]
        self.user = pwd.getpwuid(os.geteuid()).pw_name
        self.procs: dict[str, subprocess.Popen] = {}
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def env(self, **extra: str) -> dict:
        env = dict(os.environ, SLURM_CONF=str(self.conf), PATH=_search_path(), **extra)
        for name in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SRUN_"))]:
            if name != "SLURM_CONF":             # (pytest itself may run inside a job)
                del env[name]
        return env

    def run(self, *cmd: str, check: bool = True, timeout: float = 30, **extra: str) -> str:
        proc = subprocess.run(cmd, env=self.env(**extra), capture_output=True, text=True,
                              timeout=timeout, cwd=self.dir)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    # ---- start-up ----
    def _start(self) -> None:
        self._start_munge()
        self._write_conf()
        for name in ("ctld", "d"):
            (self.dir / name).mkdir(mode=0o700)
        self._daemon("slurmctld", "slurmctld", "-D", "-i")
        self._wait("slurmctld", lambda: "UP" in self.run("scontrol", "ping", check=False))
        self._daemon("slurmd", "slurmd", "-D", "-N", self.host)
        self._wait("slurmd", lambda: self.run("sinfo", "-h", "-o", "%t", check=False).strip()
                   in ("idle", "mix", "alloc"))

    def _start_munge(self) -> None:
        folder = self.dir / "munge"
        folder.mkdir(mode=0o711)
        key = folder / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self._daemon("munged", "munged", "-F", f"--key-file={key}", f"--socket={self.socket}",
                     f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
                     f"--seed-file={folder / 'munged.seed'}")
        self._wait("munged", self.socket.exists)

    def _write_conf(self) -> None:
        d, ctld_port, slurmd_port = self.dir, _free_port(), _free_port()
        self.first_job_id = secrets.randbelow(60_000_000) + 1_000_000
        self.conf.write_text(f"""\
ClusterName=mpiopttest
SlurmctldHost={self.host}(127.0.0.1)
SlurmUser={self.user}
SlurmdUser={self.user}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={self.socket},cred_expire={CRED_EXPIRE_S}
CredType=cred/munge
StateSaveLocation={d}/ctld
SlurmdSpoolDir={d}/d
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=pmi2
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=10
MinJobAge=600
MailProg=/bin/true
FirstJobId={self.first_job_id}
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={NODE_CPUS} RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def _daemon(self, name: str, *cmd: str) -> None:
        log = open(self.dir / f"{name}.out", "w")
        exe = shutil.which(cmd[0], path=_search_path())
        self.procs[name] = subprocess.Popen([exe, *cmd[1:]], env=self.env(), cwd=self.dir,
                                            stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def _wait(self, name: str, ready, timeout: float = 30) -> None:
        """Until ready() holds; SlurmUnavailable with the daemon's own words when it ended
        or never got there."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise SlurmUnavailable(f"{name} exited with status {self.procs[name].returncode}: "
                                       f"{self._said(name)}")
            if ready():
                return
            time.sleep(0.2)
        raise SlurmUnavailable(f"{name} not ready after {timeout:.0f} s: {self._said(name)}")

    def _said(self, name: str) -> str:
        """The daemon's last error lines (its log file, else its output)."""
        logs = {"munged": self.dir / "munge" / "munged.log",
                "slurmctld": self.dir / "slurmctld.log", "slurmd": self.dir / "slurmd.log"}
        lines = []
        for path in (logs[name], self.dir / f"{name}.out"):
            if path.exists():
                lines += [ln.strip() for ln in path.read_text(errors="replace").splitlines()]
        errors = [ln for ln in lines if "error" in ln.lower()] or lines
        return " | ".join(errors[-3:]) or "(nothing)"

    # ---- the end ----
    def cancel_all(self, timeout: float = 30) -> None:
        """scancel every job, and wait until the queue is empty (KillWait ends the stubborn)."""
        self.run("scancel", "--user", self.user, check=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.run("squeue", "-h", check=False).strip():
            time.sleep(0.5)

    def close(self) -> None:
        """Cancel every job, stop the daemons (slurmd first, munged last), then end any
        process still carrying this cluster's SLURM_CONF (a job step slurmd left behind)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.cancel_all()
        for name in reversed([n for n in DAEMONS if n in self.procs]):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=15)
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def leftovers(self) -> list[int]:
        """Processes (other than this one) whose environment names this cluster's slurm.conf."""
        marker = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found
