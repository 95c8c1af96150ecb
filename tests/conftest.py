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


def subprocess_env() -> dict:
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3",
               PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    return env


def mpiopt(*args, cwd=None, np: int | None = None, timeout: float = 300, check: bool = False,
           **popen) -> subprocess.CompletedProcess:
    """Run `mpiopt ARGS` (under `mpiexec -n NP` when np is given) and capture its output."""
    cmd = [str(BIN / "mpiopt"), *map(str, args)]
    if np is not None:
        cmd = [str(BIN / "mpiexec"), "-n", str(np), *cmd]
    proc = subprocess.run(cmd, cwd=cwd, env=subprocess_env(), capture_output=True, text=True,
                          timeout=timeout, **popen)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def run_mpiopt():
    return mpiopt
