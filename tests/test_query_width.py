"""`mpiopt trials` and `mpiopt best` fit the terminal they print to (issue 62): in a real
pseudo-terminal of 80 and of 200 columns no line is wider than the terminal, every
parameter and metric is still there whole (wrapped between words, never cut), and piped
into another program each trial stays on one line, for grep, even where the environment
exports COLUMNS (shells and CI runners do: it describes a terminal the pipe never
reaches)."""
from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import termios
import time

import pytest

from conftest import BIN, mpiopt, subprocess_env

OBJECTIVE = '''
def f(params):
    value = params["dropout_rate_in_dense_layers"] + params["number_of_hidden_layers"]
    return {"validation_loss": value, "training_loss_at_end": value / 2,
            "area_under_the_roc_curve": 0.9, "signal_efficiency_at_one_percent": 0.5}
'''
SPEC = """study: {name: %s}
objective: {function: %s:f, %s}
search_space:
  learning_rate_of_the_optimizer: {type: real, low: 1.0e-5, high: 1.0e-1, prior: log-uniform}
  dropout_rate_in_dense_layers: {type: real, low: 0.0, high: 0.5}
  number_of_hidden_units: {type: integer, low: 8, high: 512}
  number_of_hidden_layers: {type: integer, low: 1, high: 6}
  weight_decay_coefficient: {type: real, low: 1.0e-6, high: 1.0e-2, prior: log-uniform}
  optimizer_choice: [adam_with_warmup, sgd_with_nesterov_momentum]
search: {algorithm: random, trials: 6, seed: 2}
"""
ONE = "metric: validation_loss, direction: minimize"
TWO = "metrics: {validation_loss: minimize, training_loss_at_end: maximize}"


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    folder = tmp_path_factory.mktemp("width")
    (folder / "objective.py").write_text(OBJECTIVE)
    url = f"sqlite:///{folder / 'wide.db'}"
    for name, objective in (("wide", ONE), ("pareto", TWO)):
        spec = folder / f"{name}.yaml"
        spec.write_text(SPEC % (name, folder / "objective.py", objective))
        mpiopt("search", spec, "--storage", url, np=3, cwd=folder, check=True, timeout=240)
    return url


def in_terminal(columns: int, *args: str, env: dict | None = None) -> str:
    """`mpiopt ARGS` with its output on a pseudo-terminal `columns` wide (env: variables
    to set; COLUMNS is unset unless named there)."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    extra, env = env or {}, subprocess_env()
    env.pop("COLUMNS", None)
    env.update(extra)
    proc = subprocess.Popen([str(BIN / "mpiopt"), *args], stdout=child, stderr=child, env=env)
    os.close(child)
    out = b""
    deadline = time.monotonic() + 60           # (a command that hangs fails the test)
    while select.select([main], [], [], max(0.0, deadline - time.monotonic()))[0]:
        try:
            chunk = os.read(main, 1 << 16)
        except OSError:            # (EIO: the child closed its side)
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    try:
        assert proc.wait(timeout=max(1.0, deadline - time.monotonic())) == 0, out.decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    return out.decode().replace("\r\n", "\n")


def _words(url: str, *args: str) -> set[str]:
    """Every name=value the table must show, from the same command's JSON."""
    rows = json.loads(mpiopt(*args, "--storage", url, "--format", "json", check=True).stdout)
    words = set()
    for row in rows:
        for key in ("params", "metrics"):
            for name, value in (row.get(key) or {}).items():
                words.add(f"{name}={value:.6g}" if isinstance(value, float) else f"{name}={value}")
    return words


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize("command", [("trials", "wide"), ("best", "wide", "--top", "3"),
                                     ("best", "pareto")])
def test_tables_fit_the_terminal_and_keep_every_word(url, columns, command):
    out = in_terminal(columns, *command, "--storage", url)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns, "\n" + out
    shown = set(out.split())
    missing = _words(url, *command) - shown
    assert not missing, f"cut or lost: {sorted(missing)[:5]}\n{out}"


@pytest.mark.parametrize("columns", [None, "80"])
def test_piped_each_trial_stays_on_one_line(url, columns):
    env = subprocess_env()
    env.pop("COLUMNS", None)
    if columns:
        env["COLUMNS"] = columns
    out = mpiopt("trials", "wide", "--storage", url, check=True, env=env).stdout
    assert len(out.splitlines()) == 1 + 6
    assert max(len(line) for line in out.splitlines()) > 200     # (one line each, however long)


def test_columns_sets_the_width_on_a_terminal(url):
    out = in_terminal(200, "trials", "wide", "--storage", url, env={"COLUMNS": "80"})
    assert max(len(line) for line in out.splitlines()) <= 80, "\n" + out
