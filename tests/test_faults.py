"""Faults nobody had tried (issue 55): giant errors, hostile YAML, long names, huge
spaces, detached children, a frozen coordinator. Each case runs the real command."""
from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import BIN, mpiopt, rank0_pid, subprocess_env
from mpiopt.objective.processes import process_alive

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


# ---------------------------------------------------------------- YAML alias bombs (item 3)
def _bomb(mapping: bool) -> str:
    """Nine levels of ten aliases each: 10**9 entries once expanded, 100 lines written."""
    if mapping:
        levels = ["&l0 {" + ", ".join(f"k{i}: boom" for i in range(10)) + "}"]
        levels += [f"&l{n} {{" + ", ".join(f"k{i}: *l{n - 1}" for i in range(10)) + "}"
                   for n in range(1, 9)]
        return "{" + ", ".join(f"z{n}: {lvl}" for n, lvl in enumerate(levels)) + "}"
    levels = ["&l0 [" + ", ".join(["boom"] * 10) + "]"]
    levels += [f"&l{n} [" + ", ".join([f"*l{n - 1}"] * 10) + "]" for n in range(1, 9)]
    return "[" + ", ".join(levels) + "]"


BOMB_SPEC = """\
study: {{name: bomb}}
objective: {{function: "obj.py:f", direction: minimize{objective}}}
search_space:
  x: {{type: real, low: 0.0, high: 1.0}}
  c: {{type: categorical, choices: {choices}}}
search: {{algorithm: random, trials: 3, initial_trials: [{{x: {x}}}]{search}}}
"""


@pytest.mark.parametrize("where", ["initial_trials[0].x", "choices", "pbt.perturb",
                                   "objective mapping", "search mapping", "--set"])
def test_an_alias_bomb_in_any_field_is_one_line_before_anything_is_built(tmp_path, where):
    fields = {"x": "0.5", "choices": "[a, b]", "objective": "", "search": ""}
    if where == "initial_trials[0].x":
        fields["x"] = _bomb(False)
    elif where == "choices":
        fields["choices"] = _bomb(False)
    elif where == "pbt.perturb":
        fields["search"] = f", pbt: {{perturb: {_bomb(False)}}}"
    elif where == "objective mapping":
        fields["objective"] = f", metrics: {_bomb(True)}"
    elif where == "search mapping":
        fields["search"] = f", options: {_bomb(True)}"
    spec = tmp_path / "bomb.yaml"
    spec.write_text(BOMB_SPEC.format(**fields))
    (tmp_path / "obj.py").write_text("def f(p):\n    return p['x']\n")
    extra = ["--set", f"search.pbt.perturb={_bomb(False)}"] if where == "--set" else []
    proc = mpiopt("validate", spec, *extra, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "aliases (*name) expand to more than" in lines[0], lines[-3:]
    assert len(proc.stderr) < 500


def test_a_value_that_holds_itself_is_one_line(tmp_path):
    spec = tmp_path / "loop.yaml"
    spec.write_text(BOMB_SPEC.format(x="&me [1, *me]", choices="[a, b]", objective="", search=""))
    proc = mpiopt("validate", spec, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "cannot contain itself" in proc.stderr, proc.stderr[-2000:]


def test_a_parameter_set_twice_is_refused_with_one_line(tmp_path):
    spec = write_spec(tmp_path, "f", "def f(p):\n    return p['x']\n")
    proc = mpiopt("validate", spec, "--set", "search.trials=4", "--set", "search.trials=5",
                  cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.strip() == "mpiopt: error: --set search.trials: given twice (which one is meant?); give it once"


# ---------------------------------------------------------------- long names (item 2)
def _complete(db: Path) -> int:
    if not db.exists():          # (connecting would make an empty file)
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as con:
            return con.execute("select count(*) from trials where status = 'COMPLETE'").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_a_255_byte_name_runs_is_killed_resumes_reports_and_is_deleted(tmp_path):
    """A name of 255 bytes in UTF-8 (127 characters: two-byte letters) ran, and every
    resume crashed on its recovery and kept-result file names (Errno 36)."""
    name = "λ" * 100 + "é" * 27 + "a"
    assert len(name.encode()) == 255
    spec = write_spec(tmp_path, "slow", "import time\ndef slow(p):\n    time.sleep(1.5)\n"
                      "    return p['x']\n", trials=10, name=name)
    db = tmp_path / "r.db"
    url = f"sqlite:///{db}"
    job = subprocess.Popen([str(BIN / "mpiexec"), "-n", "3", str(BIN / "mpiopt"), "search",
                            str(spec), "--storage", url], cwd=tmp_path, env=subprocess_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        end = time.monotonic() + 120
        while _complete(db) < 2 and job.poll() is None and time.monotonic() < end:
            time.sleep(0.2)
        assert job.poll() is None, job.communicate()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.communicate()
    done = _complete(db)
    assert 2 <= done < 10
    proc = mpiopt("resume", name, "--storage", url, np=3, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert _complete(db) == 10
    report = mpiopt("report", name, "--storage", url, cwd=tmp_path, timeout=120)
    assert report.returncode == 0, report.stderr
    assert [p for p in tmp_path.glob("*.html")], "the report was written"
    gone = mpiopt("study", "delete", name, "--yes", "--storage", url, cwd=tmp_path, timeout=60)
    assert gone.returncode == 0, gone.stderr
    assert _complete(db) == 0


def test_a_256_byte_name_is_refused_with_one_line(tmp_path):
    name = "é" * 128
    spec = write_spec(tmp_path, "f", "def f(p):\n    return p['x']\n", name=name)
    proc = mpiopt("validate", spec, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "256 bytes long in UTF-8; at most 255" in proc.stderr


# ---------------------------------------------------------------- huge spaces (item 6)
def test_100_000_choices_are_validated_and_a_late_duplicate_is_still_found(tmp_path):
    """Each choice was compared with every one before it: 40,000 choices took 34 s, and
    600,000 had not finished after 120 s. The timeout is generous (a loaded CI machine);
    quadratic checking of 100,000 choices would need about 200 s."""
    choices = [f"c{i}" for i in range(100_000)]
    spec = write_spec(tmp_path, "f", "def f(p):\n    return 1.0\n",
                      space={"c": {"type": "categorical", "choices": choices}})
    proc = mpiopt("validate", spec, cwd=tmp_path, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "c99999" in proc.stdout                     # the resolved spec, every choice
    from mpiopt.space.dimensions import Categorical, SpaceError

    with pytest.raises(SpaceError, match=r"c.choices\[100001\]: duplicate choice 1.0 \(same as "
                       r"choice 100000, 1\)"):
        Categorical("c", choices + [1, 1.0])


# ---------------------------------------------------------------- detached children (item 8)
DETACHING = """\
import os, subprocess, sys
def detach(p):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                             start_new_session=True)
    with open(os.environ["PIDS_FILE"], "a") as f:
        f.write(f"{child.pid}\\n")
    return p["x"]
"""


def test_a_child_detached_with_setsid_ends_with_its_trial(tmp_path):
    """The child holds the job's output open: mpiexec waited for it (300 s here) after the
    study had finished. Now it ends as its trial ends, and the job with its study."""
    spec = write_spec(tmp_path, "detach", DETACHING, trials=4)
    env = subprocess_env()
    env["PIDS_FILE"] = str(tmp_path / "pids")
    try:
        proc = mpiopt("search", spec, "--storage", f"sqlite:///{tmp_path / 'r.db'}", np=3,
                      cwd=tmp_path, timeout=90, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
    finally:
        pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
        alive = [pid for pid in pids if process_alive(pid)]
        for pid in alive:
            os.kill(pid, signal.SIGKILL)
    assert len(pids) == 4 and not alive


# ---------------------------------------------------------------- a frozen coordinator (item 4)
@pytest.mark.parametrize("limit, after, frozen", [
    (3, 2, 7),        # twice the limit, once the leaders have heard rank 0's beats
    (24, 1, 27),      # past the limit, before rank 0's first beat (one every 2 s here)
])
def test_a_coordinator_stopped_past_the_silence_limit_and_continued_goes_on(tmp_path, limit,
                                                                            after, frozen):
    """SIGSTOP of rank 0 past the silence limit, then SIGCONT (a suspended VM, a swapped
    node): the coordinator that woke blamed the groups for its own silence and ended a
    healthy job. Now it sees the jump of its own clock, the leaders see it stopped (they
    know its process from the start-up, not from its first beat: stopped before that, the
    leaders ended the job), and the study finishes with every trial."""
    spec = write_spec(tmp_path, "slow", "import time\ndef slow(p):\n    time.sleep(0.5)\n"
                      "    return p['x']\n", trials=16)
    db = tmp_path / "r.db"
    env = subprocess_env()
    env["MPIOPT_SILENCE_LIMIT"] = str(limit)
    job = subprocess.Popen([str(BIN / "mpiexec"), "-n", "3", str(BIN / "mpiopt"), "search",
                            str(spec), "--storage", f"sqlite:///{db}"], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        end = time.monotonic() + 120
        while _complete(db) < after and job.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        assert job.poll() is None, job.communicate()
        rank0 = rank0_pid(job)
        os.kill(rank0, signal.SIGSTOP)
        time.sleep(frozen)
        os.kill(rank0, signal.SIGCONT)
        out, err = job.communicate(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 0, err[-3000:]
    assert "heartbeat" not in err and "silent" not in err, err[-3000:]
    assert _complete(db) == 16


# ---------------------------------------------------------------- after a storage outage (item 9)
def test_after_an_outage_the_summary_counts_every_finished_trial_and_status_names_the_file(tmp_path):
    """The closing summary counted 16 trials where 18 had finished (those whose write
    failed for good were left out), and `mpiopt status` gave a resume line without the
    recovery file (`mpiopt resume` from another folder would not find it)."""
    db = tmp_path / "o.db"
    url = f"sqlite:///{db}"
    spec = write_spec(tmp_path, "slow", "import time\ndef slow(p):\n    time.sleep(0.4)\n"
                      "    return p['x']\n", trials=14, name="o")
    spec.write_text(spec.read_text() + "storage: {retry_timeout: 3s}\n")
    env = {**subprocess_env(), "MPIOPT_SQLITE_BUSY_MS": "300", "MPIOPT_LEASE_PERIOD": "1"}
    job = subprocess.Popen([str(BIN / "mpiexec"), "-n", "3", str(BIN / "mpiopt"), "search",
                            str(spec), "--storage", url], cwd=tmp_path, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    lock = None
    try:
        end = time.monotonic() + 120
        while _complete(db) < 3 and job.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        lock = sqlite3.connect(db, isolation_level=None, timeout=30)
        lock.execute("BEGIN EXCLUSIVE")           # the database away until the job ended
        out, err = job.communicate(timeout=120)
    finally:
        if lock is not None:
            lock.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 1, err[-2000:]
    recovery = tmp_path / "o.mpiopt-recovery.jsonl"
    from mpiopt.kept import read_line

    kept = {r["trial_id"] for r in map(read_line, recovery.read_text().splitlines())
            if r["kind"] == "finish"}
    with sqlite3.connect(db) as con:
        written = {i for (i,) in con.execute("select id from trials where status = 'COMPLETE'")}
    summary = [ln for ln in out.splitlines() if ln.startswith("study interrupted:")]
    assert summary == [f"study interrupted: {len(kept | written)} trials "
                       f"({len(kept | written)} complete)" + summary[0].rsplit(")", 1)[1]], out
    time.sleep(3)                                 # the job's lease goes stale
    (tmp_path / "elsewhere").mkdir()
    status = mpiopt("status", "o", "--storage", url, cwd=tmp_path / "elsewhere", timeout=60)
    state = [ln for ln in status.stdout.splitlines() if ln.startswith("state")]
    assert state and f"--recovery {recovery}" in state[0] and "host ?" not in state[0], status.stdout


# ---------------------------------------------------------------- a model file that imports keras
MODEL = """\
import os, time
import keras                       # at the top, as most model files do
os.write(2, b"NATIVE-START-UP-LINE\\n")   # what TensorFlow's C++ writes to fd 2
with open(os.environ["IMPORTED_AT"], "a") as f:
    f.write(f"{time.time()}\\n")


def build_model(params):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(int(params["width"])),
                              keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model
"""

DATA = """\
import numpy as np


def load():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    return x, x.sum(axis=1, keepdims=True)
"""


def test_a_model_file_importing_keras_is_imported_at_set_up_with_its_native_lines_in_the_log(tmp_path):
    """TensorFlow's start-up lines reached the terminal (the native log was put in place
    by the first trial's import of TensorFlow, after the model file's own), and the first
    trial's duration held the import."""
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "data.py").write_text(DATA)
    spec = {"study": {"name": "k"},
            "objective": {"model": "model.py:build_model", "data": {"loader": "data.py:load"},
                          "metric": "val_loss", "direction": "minimize"},
            "search_space": {"width": {"type": "integer", "low": 2, "high": 4}},
            "search": {"algorithm": "random", "trials": 2, "seed": 1},
            "training": {"epochs": 1, "batch_size": 16, "kfold": 2}}
    (tmp_path / "k.yaml").write_text(yaml.safe_dump(spec))
    env = {**subprocess_env(), "IMPORTED_AT": str(tmp_path / "imported")}
    db = tmp_path / "k.db"
    proc = mpiopt("search", tmp_path / "k.yaml", "--storage", f"sqlite:///{db}", np=2,
                  cwd=tmp_path, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "NATIVE-START-UP-LINE" not in proc.stdout + proc.stderr
    assert "NATIVE-START-UP-LINE" in (tmp_path / "k.log").read_text()
    imported = [float(t) for t in (tmp_path / "imported").read_text().split()]
    with sqlite3.connect(db) as con:
        first = min(s for (s,) in con.execute("select started_at from trials"))
    from datetime import datetime, timezone
    started = datetime.fromisoformat(str(first)).replace(tzinfo=timezone.utc).timestamp()
    assert len(imported) == 1 and imported[0] < started   # imported before any trial began
