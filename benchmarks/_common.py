"""Helpers shared by the benchmark scripts: the venv's tools, specs, tables."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import yaml

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
OBJECTIVES = Path(__file__).resolve().parent / "objectives.py"
# the `mpiopt` command the jobs run (benchmarks/versus.py points it at a tree of its choice)
COMMAND = os.environ.get("MPIOPT_COMMAND", str(BIN / "mpiopt"))


def env(**extra) -> dict:
    e = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3")
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    e.update({k: str(v) for k, v in extra.items()})
    return e


def write_spec(path: Path, **sections) -> Path:
    path.write_text(yaml.safe_dump(sections, sort_keys=False))
    return path


def mpiopt(args, np: int | None = None, cwd=None, timeout=900, **envs) -> subprocess.CompletedProcess:
    cmd = [COMMAND, *map(str, args)]
    if np is not None and np > 1:
        cmd = [str(BIN / "mpiexec"), "-n", str(np), *cmd]
    return subprocess.run(cmd, cwd=cwd, env=env(**envs), capture_output=True, text=True, timeout=timeout)


def machine() -> str:
    return f"{platform.node()}: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python {platform.python_version()}"


def table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A Markdown table (readable in a terminal too)."""
    columns = columns or list(rows[0])
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    line = lambda vals: "| " + " | ".join(v.ljust(w) for v, w in zip(vals, widths)) + " |"
    return "\n".join([line(columns), line(["-" * w for w in widths]), *map(line, cells)])


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)
