"""Shared helpers: run the real `mpiopt` command, alone or under the venv's mpiexec."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/pgserver.py


def resume_with(np: int | None = None) -> str:
    """How the resume command in a closing line begins for a job these helpers started on
    `np` ranks: the launcher as it was run, and the count (mpiopt.run.launcher)."""
    return f"{BIN / 'mpiexec'} -n {np} mpiopt resume" if np and np > 1 else "mpiopt resume"


def subprocess_env() -> dict:
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3",
               PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    return env


_EXEC_HOOK = """import os
import sys


def _on_exec(name, module, run):
{body}


class _Hook:
    \"\"\"Hands the module's code (run) of each of {names!r} to _on_exec when it runs, not
    when a library only asks whether it is installed (importlib.util.find_spec, as
    torch._dynamo does).\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name not in {names!r}:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self or not hasattr(finder, "find_spec") \\
                else finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        run = spec.loader.exec_module
        spec.loader.exec_module = lambda module: _on_exec(name, module, run)
        return spec


sys.meta_path.insert(0, _Hook())
"""


def on_import(folder: Path, names: tuple[str, ...], body: str) -> dict:
    """An environment whose Python processes (each rank of an mpiexec job) run `body`,
    the body of `_on_exec(name, module, run)` indented by four spaces, in place of the
    code of each module in `names` (`run(module)` runs it): a sitecustomize module first
    on PYTHONPATH, written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_EXEC_HOOK.format(names=names, body=body))
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH")) if p)
    return env


WATCHED_IMPORTS = ("tensorflow", "keras", "torch")


def watching_imports(folder: Path) -> tuple[dict, Path]:
    """(an environment, a file): every Python process started with the environment (each
    rank of an mpiexec job) writes a line 'PID NAME' to the file when it imports
    tensorflow, keras or torch."""
    env = on_import(folder / "import-watch", WATCHED_IMPORTS, """\
    with open(os.environ["MPIOPT_TEST_IMPORTS"], "a") as f:
        f.write(f"{os.getpid()} {name}\\n")
    run(module)""")
    env["MPIOPT_TEST_IMPORTS"] = str(folder / "imports.txt")
    return env, folder / "imports.txt"


def imported(log: Path) -> dict[str, set[int]]:
    """{watched name: the process ids that imported it} from a watching_imports file."""
    out: dict[str, set[int]] = {name: set() for name in WATCHED_IMPORTS}
    for line in log.read_text().splitlines() if log.exists() else ():
        pid, name = line.split()
        out[name].add(int(pid))
    return out


def mpiopt(*args, cwd=None, np: int | None = None, timeout: float = 300, check: bool = False,
           **popen) -> subprocess.CompletedProcess:
    """Run `mpiopt ARGS` (under `mpiexec -n NP` when np is given) and capture its output."""
    cmd = [str(BIN / "mpiopt"), *map(str, args)]
    if np is not None:
        cmd = [str(BIN / "mpiexec"), "-n", str(np), *cmd]
    env = popen.pop("env", None) or subprocess_env()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, **popen)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def study_state(url: str, name: str):
    """(the study's record, its trials), read afresh from the database."""
    from mpiopt.storage import open_storage

    storage = open_storage(url)
    try:
        study = storage.get_study(name)
        return study, storage.get_trials(study.id)
    finally:
        storage.close()


def rank0_pid(job: subprocess.Popen) -> int:
    """The pid of world rank 0's `mpiopt` under the mpiexec `job` (from its environment)."""
    from mpiopt.objective.processes import descendants

    for pid in sorted(descendants(job.pid)):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"PMI_RANK=0" in env and b"mpiopt" in cmdline:
            return pid
    raise AssertionError("no rank 0 found")


@pytest.fixture
def run_mpiopt():
    return mpiopt


# ---- databases: every storage, resume and chaos test runs on SQLite and on PostgreSQL ----
ENGINES = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def pg_server():
    """One real PostgreSQL cluster for the session (tests/pgserver.py says why this one).
    Missing server binaries fail the tests that need it: `make test` installs them."""
    from pgserver import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        if os.environ.get("MPIOPT_TEST_NO_POSTGRES") == "1":
            pytest.skip("MPIOPT_TEST_NO_POSTGRES=1: PostgreSQL tests skipped")
        pytest.fail("PostgreSQL server binaries not found: run `make test` (it installs Debian's "
                    "postgresql via .ci/ensure-postgresql) or set MPIOPT_TEST_NO_POSTGRES=1")
    server = PostgresServer(bindir)
    yield server
    server.close()


@pytest.fixture(params=ENGINES)
def db_url(request, tmp_path):
    """A fresh, empty results database URL on each engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    return request.getfixturevalue("pg_server").new_database()


MEMORY_URL = "sqlite://"      # the in-memory storage (storage/_engine.py: OneHolderPool)


@pytest.fixture(params=[*ENGINES, "memory"])
def storage_url(request, tmp_path):
    """A fresh, empty results database URL on each engine and in memory: for the cases
    that open it once (a new open of the in-memory URL is a new database)."""
    if request.param == "memory":
        return MEMORY_URL
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    return request.getfixturevalue("pg_server").new_database()


@pytest.fixture(autouse=True)
def _no_native_log_leak(monkeypatch):
    """A command run in this process (cli main) sets MPIOPT_NATIVE_LOG for the TensorFlow
    it may import; it must not reach the next tests' subprocesses, whose headers and logs
    would then name another test's file."""
    if "MPIOPT_NATIVE_LOG" not in os.environ:
        monkeypatch.setenv("MPIOPT_NATIVE_LOG", "")
        monkeypatch.delenv("MPIOPT_NATIVE_LOG")     # recorded as unset: removed after the test
