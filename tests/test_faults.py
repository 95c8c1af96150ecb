"""Faults nobody had tried (issue 55): giant errors, hostile YAML, long names, huge
spaces, detached children, a frozen coordinator. Each case runs the real command."""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import yaml

from conftest import mpiopt

BIG = 20 * 2**20       # a 20 MB exception message


def write_spec(tmp_path: Path, function: str, source: str, trials=3, name="f", space=None,
               **search) -> Path:
    (tmp_path / "obj.py").write_text(source)
    spec = {"study": {"name": name},
            "objective": {"function": f"{tmp_path / 'obj.py'}:{function}", "direction": "minimize"},
            "search_space": space or {"x": {"type": "real", "low": 0.0, "high": 1.0}},
            "search": {"algorithm": "random", "trials": trials, "seed": 3, **search}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    return path


def test_a_20_mb_error_is_cut_where_it_is_stored_printed_and_rendered(tmp_path):
    spec = write_spec(tmp_path, "huge", f"def huge(p):\n    raise ValueError('E' * {BIG} + 'END')\n",
                      trials=3)
    db = tmp_path / "r.db"
    proc = mpiopt("search", spec, "--storage", f"sqlite:///{db}", cwd=tmp_path, timeout=120)
    printed = len(proc.stdout) + len(proc.stderr)
    assert printed < 100_000, proc.stderr[-2000:]
    assert "characters cut" in proc.stdout + proc.stderr
    with sqlite3.connect(db) as con:
        errors = [e for (e,) in con.execute("select error from trials")]
    assert len(errors) == 3 and all(len(e) < 5000 and "characters cut" in e for e in errors)
    assert all(e.startswith("ValueError: EEEE") and "END" in e for e in errors), errors[0][:100]
    assert db.stat().st_size < 2_000_000
    report = mpiopt("report", "f", "--storage", f"sqlite:///{db}", "-o", tmp_path / "f.html",
                    cwd=tmp_path, timeout=120)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "f.html").stat().st_size < 10_000_000
    shown = mpiopt("show", "f", "0", "--storage", f"sqlite:///{db}", cwd=tmp_path, timeout=60)
    assert len(shown.stdout) < 20_000 and "characters cut" in shown.stdout, shown.stderr
