"""Pruners decide on scripted learning curves (lower is better, epochs from 1 in each fold)."""
from __future__ import annotations

import math

import pytest

from mpiopt.search import ASHAPruner, MedianPruner, make_pruner
from mpiopt.search.pruners import figure_so_far
from mpiopt.spec import PruningSpec
from mpiopt.trial import Step

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
    ours = {9: {}}
    pruned = []
    for e in range(1, 10):            # the trial's own curve so far is in the history too
        if pruner.should_prune(9, e, 1.0, {**history, **ours}):
            pruned.append(e)
        ours[9][e] = 1.0
    assert pruned == [2, 6]


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


# ---- K-fold: like with like (issue 62) ---------------------------------------------------------
def _kfold(fold0: list, fold1: list, fold2: list = ()) -> dict:
    """A curve of folds one after another, each fold's epochs from 1 (lower is better)."""
    return {Step(f, e): v for f, values in enumerate((fold0, fold1, fold2))
            for e, v in enumerate(values, start=1)}


def test_a_new_folds_first_epochs_never_prune_a_trial_good_on_its_finished_folds():
    """The issue's case: a trial better than the others on fold 1 starts fold 2 with a new
    model's first epoch, worse than theirs. In the fold's warm-up it is judged on its
    finished folds (better: it goes on); once past it, on those and the fold's best so far."""
    others = {n: _kfold([0.5, 0.2, 0.1], [0.5, 0.2, 0.12], [0.3 + n / 100]) for n in range(5)}
    ours = _kfold([0.5, 0.1, 0.05], [0.5, 0.1, 0.03])
    pruner = MedianPruner(warmup_epochs=2, min_trials=3)
    assert not pruner.should_prune(9, Step(2, 1), 0.8, {**others, 9: ours})
    judged = pruner.judge(9, Step(2, 1), 0.8, {**others, 9: ours})
    assert judged.figure == pytest.approx(0.04) and judged.bar == pytest.approx(0.11)
    # the encoded step 13 (= 2 * 6 + 1) once compared 0.8 with the others' 0.3 there: pruned
    assert MedianPruner(2, 3).should_prune(9, 13, 0.8, {n: {13: 0.3 + n / 100} for n in range(5)})


def test_the_figure_is_the_finished_folds_and_the_current_folds_best_so_far():
    curve = _kfold([0.9, 0.4, 0.6], [0.8, 0.5, 0.7], [0.9, 0.3])
    assert figure_so_far(curve, Step(0, 3)) == pytest.approx(0.4)         # fold 0's best
    assert figure_so_far(curve, Step(2, 2)) == pytest.approx((0.4 + 0.5 + 0.3) / 3)
    assert figure_so_far(curve, Step(2, 1), warmup=1) == pytest.approx((0.4 + 0.5) / 2)
    assert figure_so_far(curve, Step(0, 1), warmup=1) is None             # nothing to go on
    # folds side by side: every fold counts up to this epoch, and the warm-up is theirs too
    assert figure_so_far(curve, Step(1, 2), side_by_side=True) == pytest.approx((0.4 + 0.5) / 2)
    assert figure_so_far(curve, Step(1, 1), warmup=1, side_by_side=True) is None


def test_trials_of_different_epochs_are_compared_at_the_same_fold_and_epoch():
    """training.epochs searched: a trial of 6 epochs per fold at fold 1's epoch 2 is
    compared with the others' fold 1 epoch 2, whatever their epochs per fold (a step
    f * epochs + e meant other points in each)."""
    history = {0: _kfold([0.5, 0.4], [0.5, 0.4]),                      # 2 epochs a fold
               1: _kfold([0.5, 0.4, 0.3, 0.2], [0.5, 0.45]),           # 4 epochs a fold
               2: _kfold([0.5] * 6, [0.6])}                            # not at (1, 2) yet
    ours = _kfold([0.9, 0.3, 0.3, 0.3, 0.3, 0.3], [0.6])
    judged = MedianPruner(warmup_epochs=1, min_trials=2).judge(7, Step(1, 2), 0.5,
                                                             {**history, 7: ours})
    assert judged.others == 2 and judged.bar == pytest.approx((0.4 + 0.325) / 2)
    assert judged.prune and judged.figure == pytest.approx(0.4)


def test_asha_rungs_count_the_epochs_trained_over_the_folds():
    """Rungs where the trial has trained min_epoch * rf**k epochs in all, not again at
    every fold's own epoch 2 (that would halve the same trials in every fold). Folds one
    after another: a rung is decided at the end of the fold it falls in (learnt from the
    next fold's first report); side by side, at the epoch, which all folds share."""
    better = {n: {Step(f, e): 0.0 for f in range(3) for e in range(1, 7)} for n in range(4)}

    def pruned_at(pruner, epochs):
        ours, at = {}, []
        for step in [Step(f, e) for f in range(3) for e in range(1, epochs + 1)]:
            if pruner.should_prune(9, step, 1.0, {**better, 9: ours}):
                at.append(step)
            ours[step] = 1.0
        return at

    # 3 folds of 6: rungs at 2 and 6 epochs trained fall in fold 0, 18 in fold 2 (the end)
    assert pruned_at(ASHAPruner(reduction_factor=3, min_epoch=2, folds=3), 6) == [(1, 1)]
    # 3 folds of 2: rung 1 in fold 0, rung 3 in fold 1, rung 9 past the end
    assert pruned_at(ASHAPruner(reduction_factor=3, min_epoch=1, folds=3), 2) == [(1, 1), (2, 1)]
    side = ASHAPruner(reduction_factor=3, min_epoch=2, side_by_side=True, folds=3)
    assert side.should_prune(9, Step(1, 2), 1.0, better) and \
        not side.should_prune(9, Step(1, 3), 1.0, better)


def test_asha_with_folds_in_turn_decides_on_finished_folds_not_a_folds_early_epochs():
    """Folds one after another (3 of 6 epochs, rf 3, min_epoch 2: rungs at 2 and 6 epochs
    trained, both in fold 0). A trial that starts slowly and ends fold 0 best is not
    stopped on fold 0's second epoch, where it is behind every other trial: it is judged
    once fold 0 has ended, on fold 0's best epoch, against the trials that finished fold 0
    (whatever their epochs per fold). One that ends fold 0 worst is stopped there."""
    others = {n: _kfold([0.5, 0.3 + n / 100, 0.25, 0.2 + n / 100, 0.2, 0.2], [0.6])
              for n in range(4)}
    others[4] = _kfold([0.5, 0.3, 0.22, 0.21], [0.6])                    # 4 epochs a fold
    others[5] = _kfold([0.5, 0.3, 0.25], [])                             # still in fold 0
    pruner = ASHAPruner(reduction_factor=3, min_epoch=2, folds=3)
    slow = _kfold([0.9, 0.8, 0.4, 0.15, 0.1, 0.1], [0.7])
    assert _stops(pruner, slow, others) == []
    judged = pruner.judge(9, Step(1, 1), 0.7, {**others, 9: slow})
    assert (judged.figure, judged.others, judged.bar) == (0.1, 5, 0.2)  # the best 2 of 6 go on
    assert _stops(pruner, _kfold([0.9, 0.8, 0.4, 0.3, 0.3, 0.3], [0.5]), others) == [(1, 1)]
    # one fold (a holdout): the rungs stay at the epochs, on the best so far
    holdout = ASHAPruner(reduction_factor=3, min_epoch=2, folds=1)
    assert holdout.should_prune(9, Step(0, 2), 0.8, {**others, 9: slow})


def _stops(pruner, curve: dict, others: dict) -> list:
    """The steps at which `pruner` would stop trial 9 reporting `curve` in turn."""
    ours, at = {}, []
    for step, value in curve.items():
        if pruner.should_prune(9, step, value, {**others, 9: ours}):
            at.append(step)
        ours[step] = value
    return at


def test_the_reason_says_where_and_against_what_in_the_metrics_units():
    history = {n: {Step(0, 1): -0.5, Step(0, 2): -0.9 - n / 100} for n in range(4)}
    judged = MedianPruner(warmup_epochs=1, min_trials=3).judge(9, Step(0, 2), -0.7, history)
    assert judged.text(sign=-1.0, folds=1) == ("pruned at epoch 2: its best so far 0.7 is "
                                              "worse than the median 0.915 of 4 other trials "
                                              "there")
    asha = ASHAPruner(reduction_factor=2, min_epoch=2).judge(9, Step(1, 1), 0.7, {
        **{n: {Step(0, 1): 0.1, Step(1, 1): 0.1 * n} for n in range(3)},
        9: {Step(0, 1): 0.7}})
    assert asha.text(folds=1) == ("pruned at epoch 1 (a rung): its best so far 0.7 is outside "
                                  "the best 1/2 of the 4 trials there (the cut: 0.1)")
    at_end = ASHAPruner(reduction_factor=2, min_epoch=2, folds=3).judge(9, Step(1, 1), 0.1, {
        **{n: {Step(0, 1): 0.2, Step(0, 2): 0.1 * n, Step(1, 1): 0.5} for n in range(3)},
        9: {Step(0, 1): 0.9, Step(0, 2): 0.7}})
    assert at_end.text(folds=3) == ("pruned at fold 1 epoch 1 (the rung at fold 0's end): its "
                                    "mean over fold 0 0.7 is outside the best 1/2 of the 4 "
                                    "trials that finished fold 0 (the cut: 0.1)")
    nan = MedianPruner().judge(1, Step(0, 3), math.nan, {})
    assert nan.prune and nan.text(folds=1) == "pruned at epoch 3: its value is nan"
