"""mpiopt.knobs: every MPIOPT_* variable parsed once, a bad value refused with one line and
status 2 before anything is written (a real `mpiopt search`, alone and under mpiexec)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import BIN, ROOT, mpiopt, subprocess_env
from mpiopt import knobs

FUNCTIONS = ROOT / "tests" / "objectives" / "functions.py"
NUMBERS = [k for k in knobs.KNOBS if k.kind is not str]


@pytest.mark.parametrize("knob", NUMBERS, ids=lambda k: k.env)
@pytest.mark.parametrize("raw", ["abc", "-1", "0", "nan", "inf", "1e300", "3x"])
def test_a_value_a_knob_may_not_take_is_refused_naming_it_and_its_range(knob, raw):
    if raw == "0" and knob.low <= 0:
        pytest.skip("0 is allowed")
    with pytest.raises(knobs.KnobError) as refused:
        knob.get({knob.env: raw})
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"{knob.env}={raw!r}: ")
    assert f"allowed: {knob.allowed()}" in line and " from " in knob.allowed()
    assert refused.value.exit_code == 2


@pytest.mark.parametrize("knob", NUMBERS, ids=lambda k: k.env)
def test_a_knob_takes_its_range_and_an_empty_value_is_its_default(knob):
    assert knob.get({}) == knob.default and knob.get({knob.env: "  "}) == knob.default
    assert not knob.given({knob.env: ""}) and knob.given({knob.env: str(knob.low)})
    for value in (knob.low, knob.high):
        text = str(int(value)) if knob.kind is int else repr(float(value))
        assert knob.get({knob.env: text}) == value
    if knob.kind is int:
        with pytest.raises(knobs.KnobError, match="not a number"):
            knob.get({knob.env: "2.5"})


def test_a_word_knob_takes_its_words_and_refuses_others_naming_them():
    knob = knobs.TORCH_COLLECTIVES
    assert knob.get({}) == "auto" and [knob.get({knob.env: w}) for w in knob.choices] == \
        ["auto", "mpi", "torch"]
    with pytest.raises(knobs.KnobError) as refused:
        knob.get({knob.env: "nccl"})
    assert str(refused.value) == ("MPIOPT_TORCH_COLLECTIVES='nccl': not a known word; "
                                  "allowed: one of auto, mpi, torch (default auto)")
    assert refused.value.exit_code == 2


def test_the_limits_hold_their_relations():
    """What the end of a run relies on: a rank's exit waits for threads as long as the
    coordinator waits for BYEs; the rest of the exit outlasts a peer's wait for its
    threads; a stuck group's rank stays until the coordinator's abort came."""
    assert knobs.GRACE_S == knobs.WIND_DOWN_S == knobs.STOP_WAIT_S
    assert knobs.EXIT_GRACE.low > knobs.GRACE_S and knobs.EXIT_GRACE.default >= knobs.EXIT_GRACE.low
    assert knobs.STAY_S > knobs.WIND_DOWN_S + knobs.ABORT_PAUSE_S
    for startup in (knobs.STARTUP_TIMEOUT.low, knobs.STARTUP_TIMEOUT.default):
        for rank in (1, 2):
            assert knobs.lease_wait_s(startup) < startup < knobs.rank0_silence_s(startup, rank)
    assert knobs.rank0_silence_s(600, 1) < knobs.rank0_silence_s(600, 2)
    assert [knobs.stuck_grace_s(t) for t in (None, 1, 30, 600)] == [60, 5, 30, 60]


def test_the_table_names_every_variable_once():
    table = knobs.table().splitlines()
    assert len(table) == 2 + len(knobs.KNOBS)
    assert all(f"| `{k.env}` |" in "\n".join(table) for k in knobs.KNOBS)


def test_every_mpiopt_variable_read_is_declared_and_read_through_its_knob():
    """A variable read with os.environ elsewhere would take garbage in silence again."""
    declared = {k.env for k in knobs.KNOBS}
    source = ROOT / "mpiopt"
    for path in source.rglob("*.py"):
        text = path.read_text()
        named = set(re.findall(r"\bMPIOPT_[A-Z_]+\b", text)) - {"MPIOPT_TEST_SLEEP"}
        assert named <= declared, (path, named - declared)
        if path.name != "knobs.py":
            assert not re.search(r"environ(\.get\(|\[)\s*[\"']MPIOPT_", text), path


def _spec(tmp_path: Path) -> Path:
    spec = {"study": {"name": "k"},
            "objective": {"function": f"{FUNCTIONS}:branin", "direction": "minimize"},
            "search_space": {"x": {"type": "real", "low": -5.0, "high": 10.0},
                             "y": {"type": "real", "low": 0.0, "high": 15.0}},
            "search": {"algorithm": "random", "trials": 3, "seed": 1}}
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _refused(proc, tmp_path, name, rank=None):
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and f"{name}=" in lines[0] and "allowed: " in lines[0], proc.stderr
    if rank is not None:
        assert f"rank {rank} on " in lines[0], lines
    assert not list(tmp_path.glob("*.db*")), "something was written"


@pytest.mark.parametrize("name, raw", [("MPIOPT_GROUP_WAIT", "abc"),
                                       ("MPIOPT_TORCH_COLLECTIVES", "nccl"),
                                       ("MPIOPT_STARTUP_TIMEOUT", "0"),
                                       ("MPIOPT_SQLITE_BUSY_MS", "-1"),
                                       ("MPIOPT_EXIT_GRACE", "5")])
def test_a_bad_value_ends_a_single_process_search_before_anything_is_written(tmp_path, name, raw):
    env = {**subprocess_env(), name: raw}
    proc = mpiopt("search", _spec(tmp_path), "--storage", f"sqlite:///{tmp_path / 'k.db'}",
                  cwd=tmp_path, env=env, timeout=120)
    _refused(proc, tmp_path, name)


def test_a_bad_value_ends_a_job_of_three_ranks_with_one_line(tmp_path):
    env = {**subprocess_env(), "MPIOPT_SILENCE_LIMIT": "-1"}
    proc = mpiopt("search", _spec(tmp_path), "--storage", f"sqlite:///{tmp_path / 'k.db'}",
                  np=3, cwd=tmp_path, env=env, timeout=120)
    _refused(proc, tmp_path, "MPIOPT_SILENCE_LIMIT")


def test_a_bad_value_on_one_rank_only_is_reported_by_rank_0(tmp_path):
    """The variables are each rank's own (`-env` for one part of the job): a rank checks
    its own in the start-up's set-up, so the job still ends with one line and nothing
    written, where a rank ending on its own before MPI's start left the others waiting."""
    spec, url = _spec(tmp_path), f"sqlite:///{tmp_path / 'k.db'}"
    part = [str(BIN / "mpiopt"), "search", str(spec), "--storage", url]
    cmd = [str(BIN / "mpiexec"), "-n", "2", *part, ":", "-n", "1", "-env",
           "MPIOPT_GROUP_WAIT", "abc", *part]
    proc = subprocess.run(cmd, cwd=tmp_path, env=subprocess_env(), capture_output=True,
                          text=True, timeout=120)
    _refused(proc, tmp_path, "MPIOPT_GROUP_WAIT", rank=2)


def test_a_bad_value_ends_a_query_command_too(tmp_path):
    env = {**subprocess_env(), "MPIOPT_LEASE_PERIOD": "0.1"}
    proc = mpiopt("studies", "--storage", f"sqlite:///{tmp_path / 'k.db'}", cwd=tmp_path,
                  env=env, timeout=60)
    _refused(proc, tmp_path, "MPIOPT_LEASE_PERIOD")
