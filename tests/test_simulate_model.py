"""benchmarks/simulate_model.py: the model-based searcher on a simulated clock. The
searcher's CPU time is injected here (a counter), so what the accounting must show does
not depend on the machine: an ask that costs nothing never leaves a group waiting long
enough for a random filler; asks that cost seconds each, with results arriving faster,
do; the counts and the shares agree with each other."""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def model():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import problems
        import simulate_model

        yield simulate_model, problems
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def _run(model, tmp_path, cpu, algorithm="auto", groups=8, trials=24):
    simulate_model, problems = model
    space = problems._reals(6, 0.0, 1.0)          # six numbers: auto is the GP + CMA-ES pair
    return simulate_model.run(f"sqlite:///{tmp_path / 'sim.db'}", space, problems.hartmann6,
                              algorithm, groups, trials, cpu=cpu)


def _counter(step_s: float):
    """A CPU clock that advances step_s at every reading."""
    ticks = itertools.count()
    return lambda: step_s * next(ticks)


def _consistent(r: dict, trials: int) -> None:
    assert r["trials"] == trials
    assert 0.0 <= r["busy"] <= 1.0
    assert 0 <= r["fillers"] <= r["trials"]
    assert r["filler share"] == pytest.approx(r["fillers"] / r["trials"])
    assert r["model asks"] >= r["trials"] - r["fillers"]     # every other trial was asked


def test_a_searcher_that_costs_no_time_gives_no_fillers(model, tmp_path):
    r = _run(model, tmp_path, cpu=lambda: 0.0)
    _consistent(r, 24)
    assert r["fillers"] == 0 and r["searcher CPU s"] == 0.0
    assert r["busy"] > 0.9          # nobody waited for the model (only for the coordinator)


def test_asks_slower_than_the_results_give_fillers_and_idle_groups(model, tmp_path):
    r = _run(model, tmp_path, cpu=_counter(5.0))    # 10 s per ask, results every ~4 s
    _consistent(r, 24)
    assert r["fillers"] > 0
    assert r["searcher CPU s"] > 0 and r["busy"] < 1.0


def test_a_fast_searcher_runs_in_the_loop_and_keeps_the_groups_busy(model, tmp_path):
    r = _run(model, tmp_path, cpu=_counter(5.0), algorithm="random")
    _consistent(r, 24)
    assert r["fillers"] == 0 and r["searcher CPU s"] is None    # no background thread


def test_a_horizon_stops_the_run_there_and_the_shares_cover_it(model, tmp_path):
    simulate_model, problems = model
    r = simulate_model.run(f"sqlite:///{tmp_path / 'sim.db'}", problems._reals(6, 0.0, 1.0),
                           problems.hartmann6, "auto", 8, 24, cpu=lambda: 0.0, horizon=40.0)
    assert r["simulated s"] == 40.0
    assert 8 <= r["trials"] < 24 and r["finished"] < r["trials"]   # 10-60 s trials: a wave
    assert 0.0 <= r["busy"] <= 1.0 and r["fillers"] == 0
