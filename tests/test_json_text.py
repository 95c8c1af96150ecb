"""Every JSON mpiopt writes for others is strict JSON (issue 65, item 4): an objective's
infinite or NaN metric or epoch value is `null` in `--format json` and `mpiopt export`,
which `jq` and `JSON.parse` read; and every JSON writer of the package goes through
mpiopt.jsontext, so a new one cannot forget it."""
from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import mpiopt, study_state
from mpiopt import jsontext

PACKAGE = Path(__file__).resolve().parent.parent / "mpiopt"

OBJECTIVE = """\
import math

def diverges(params, report):
    report(0, math.nan)
    report(1, math.inf)
    report(2, -math.inf)
    return {"loss": params["x"], "grad_norm": math.inf, "spread": math.nan, "floor": -math.inf}
"""


def strict(text: str):
    """json.loads as JSON.parse and jq read: a bare NaN or Infinity is an error."""
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def diverged(tmp_path_factory):
    """A real study under mpiexec whose trials report NaN and infinite epoch values and
    return infinite and NaN metrics: its database URL."""
    tmp = tmp_path_factory.mktemp("diverged")
    (tmp / "obj.py").write_text(OBJECTIVE)
    spec = {"study": {"name": "d"},
            "objective": {"function": f"{tmp / 'obj.py'}:diverges", "direction": "minimize",
                          "metric": "loss"},
            "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0}},
            "search": {"algorithm": "random", "trials": 3, "seed": 1}}
    (tmp / "s.yaml").write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp / 'r.db'}"
    proc = mpiopt("search", tmp / "s.yaml", "--storage", url, np=3, cwd=tmp, timeout=180)
    assert proc.returncode == 0 and "study complete" in proc.stdout, proc.stdout + proc.stderr
    _, trials = study_state(url, "d")
    assert all(math.isinf(t.metrics["grad_norm"]) for t in trials) and len(trials) == 3
    return url


@pytest.mark.parametrize("command", [("trials", "d"), ("best", "d"), ("show", "d", "0"),
                                     ("status", "d"), ("studies",)])
def test_query_commands_print_strict_json(diverged, command):
    proc = mpiopt(*command, "--storage", diverged, "--format", "json", check=True)
    data = strict(proc.stdout)
    if command[0] in ("trials", "best", "show"):
        trial = data if command[0] == "show" else data[0]
        assert trial["metrics"] == {"loss": trial["value"], "grad_norm": None, "spread": None,
                                    "floor": None}
    if command[0] == "show":
        assert data["intermediate"] == {"0": {"0": None, "1": None, "2": None}}


def test_export_writes_strict_json_to_a_file_and_to_stdout(diverged, tmp_path):
    out = tmp_path / "d.json"
    mpiopt("export", "d", "--storage", diverged, "--format", "json", "-o", out, check=True)
    rows = strict(out.read_text(encoding="utf-8"))
    assert [r["user_attrs"]["grad_norm"] for r in rows] == [None] * 3
    printed = mpiopt("export", "d", "--storage", diverged, "--format", "json", check=True)
    assert strict(printed.stdout) == rows
    trace = mpiopt("export", "d", "--storage", diverged, "--format", "chrome-trace", check=True)
    assert strict(trace.stdout)["traceEvents"]


def test_a_value_a_default_makes_is_made_strict_too():
    """numpy's float32 is no float: json hands it to `default`, whose inf must not slip by."""
    text = jsontext.dumps({"a": [np.float32("inf"), np.float64("nan"), 1.5],
                           "b": (np.array([np.inf, 2.0]),)},
                          default=lambda o: o.tolist() if hasattr(o, "tolist") else float(o))
    assert strict(text) == {"a": [None, None, 1.5], "b": [[None, 2.0]]}


def test_exact_text_gives_back_what_was_written():
    """What only mpiopt reads back (a checkpoint's NaN best value) keeps every float."""
    back = json.loads(jsontext.exact({"best": math.nan, "top": -math.inf}))
    assert math.isnan(back["best"]) and back["top"] == -math.inf


def test_every_json_writer_goes_through_jsontext():
    """json.dump/json.dumps anywhere else in the package is a writer that chose neither
    strict nor exact text."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "jsontext.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("dump", "dumps") \
                    and isinstance(node.value, ast.Name) and node.value.id == "json":
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not found, f"write JSON through mpiopt.jsontext: {found}"
