"""Pruners decide on scripted learning curves (lower is better, epochs from 1)."""
from __future__ import annotations

import math

import pytest

from mpiopt.search import ASHAPruner, MedianPruner, make_pruner
from mpiopt.spec import PruningSpec

# five other trials; at epoch 2 their values are 1..5 (median 3), at epoch 3 only two report
HISTORY = {
    0: {1: 9.0, 2: 1.0, 3: 0.5},
    1: {1: 9.0, 2: 2.0, 3: 0.9},
    2: {1: 9.0, 2: 3.0},
    3: {1: 9.0, 2: 4.0},
    4: {1: 9.0, 2: 5.0},
}


def test_median_prunes_worse_than_the_median_only():
    pruner = MedianPruner(warmup_epochs=1, min_trials=5)
    assert pruner.should_prune(7, 2, 3.5, HISTORY)
    assert not pruner.should_prune(7, 2, 3.0, HISTORY)  # equal to the median: keep
    assert not pruner.should_prune(7, 2, 0.1, HISTORY)


def test_median_waits_for_warmup_and_enough_trials():
    assert not MedianPruner(warmup_epochs=2, min_trials=5).should_prune(7, 2, 99.0, HISTORY)
    assert not MedianPruner(warmup_epochs=1, min_trials=5).should_prune(7, 3, 99.0, HISTORY)
    assert MedianPruner(warmup_epochs=1, min_trials=2).should_prune(7, 3, 0.8, HISTORY)  # median 0.7
    assert not MedianPruner(warmup_epochs=0, min_trials=1).should_prune(7, 4, 99.0, HISTORY)


def test_median_ignores_the_trial_itself_and_non_finite_history():
    history = dict(HISTORY)
    history[7] = {2: 100.0}
    history[8] = {2: math.nan}
    assert not MedianPruner(1, 5).should_prune(7, 2, 2.9, history)  # median still 3
    assert MedianPruner(1, 5).should_prune(7, 2, math.nan, {})  # a NaN curve stops at once


def test_median_of_an_even_count_averages_the_middle_pair():
    history = {i: {2: float(v)} for i, v in enumerate([1, 2, 3, 4])}
    pruner = MedianPruner(warmup_epochs=1, min_trials=4)
    assert pruner.should_prune(9, 2, 2.6, history)
    assert not pruner.should_prune(9, 2, 2.5, history)


def test_asha_rungs():
    pruner = ASHAPruner(reduction_factor=3, min_epoch=1)
    assert [e for e in range(1, 30) if pruner.is_rung(e)] == [1, 3, 9, 27]
    assert [e for e in range(1, 20) if ASHAPruner(2, 2).is_rung(e)] == [2, 4, 8, 16]


def test_asha_keeps_the_top_fraction_at_a_rung():
    history = {i: {3: float(v)} for i, v in enumerate([1, 2, 3, 4, 5])}  # plus ours: 6 values
    pruner = ASHAPruner(reduction_factor=3, min_epoch=1)  # the best 2 of 6 continue
    assert not pruner.should_prune(9, 3, 1.5, history)
    assert not pruner.should_prune(9, 3, 2.0, history)  # tie with second best: keep
    assert pruner.should_prune(9, 3, 2.5, history)


def test_asha_never_prunes_between_rungs_or_before_min_epoch():
    history = {i: {e: 0.0 for e in range(1, 10)} for i in range(6)}
    pruner = ASHAPruner(reduction_factor=3, min_epoch=2)
    assert [e for e in range(1, 10) if pruner.should_prune(9, e, 1.0, history)] == [2, 6]


def test_asha_first_at_a_rung_continues_then_must_beat_the_best():
    pruner = ASHAPruner(reduction_factor=3, min_epoch=1)
    assert not pruner.should_prune(0, 1, 5.0, {})
    assert pruner.should_prune(1, 1, 6.0, {0: {1: 5.0}})
    assert not pruner.should_prune(1, 1, 4.0, {0: {1: 5.0}})


def test_make_pruner():
    assert make_pruner(None) is None
    median = make_pruner(PruningSpec(pruner="median", warmup_epochs=3, min_trials=2))
    assert isinstance(median, MedianPruner) and median.warmup_epochs == 3 and median.min_trials == 2
    asha = make_pruner(PruningSpec(pruner="asha", reduction_factor=4, min_epoch=2))
    assert isinstance(asha, ASHAPruner) and (asha.rf, asha.min_epoch) == (4, 2)
    assert isinstance(make_pruner({"pruner": "asha"}), ASHAPruner)
    with pytest.raises(ValueError, match="hyperband"):
        make_pruner({"pruner": "hyperband"})
