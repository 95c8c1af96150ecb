"""K-fold and holdout splits: disjoint, covering, stratified, reproducible from the seed."""
from __future__ import annotations

import numpy as np
import pytest

from mpiopt.training.kfold import class_labels, holdout_split, kfold_splits


def classes(n=103, k=3, seed=0):
    return np.random.default_rng(seed).choice(k, size=n, p=[0.6, 0.3, 0.1][:k] if k == 3 else None)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_validation_parts_are_disjoint_and_cover_the_data(k):
    y = classes()
    splits = kfold_splits(y, k, seed=4)
    vals = np.concatenate([v for _, v in splits])
    assert sorted(vals) == list(range(len(y)))
    for train, val in splits:
        assert not set(train) & set(val)
        assert len(train) + len(val) == len(y)
    sizes = [len(v) for _, v in splits]
    assert max(sizes) - min(sizes) <= 1


def test_folds_are_stratified():
    y = classes(n=300)
    for _, val in kfold_splits(y, 3, seed=1):
        for c in range(3):
            share = np.sum(y == c) / 3
            assert abs(np.sum(y[val] == c) - share) <= 1


def test_one_hot_labels_are_stratified_by_class():
    y = classes(n=90)
    one_hot = np.eye(3)[y]
    assert np.array_equal(class_labels(one_hot), y)
    a = kfold_splits(one_hot, 3, seed=2)
    b = kfold_splits(y, 3, seed=2)
    assert all(np.array_equal(x[1], z[1]) for x, z in zip(a, b))


def test_the_seed_decides_the_shuffle():
    y = classes()
    same = kfold_splits(y, 3, seed=7), kfold_splits(y, 3, seed=7)
    other = kfold_splits(y, 3, seed=8)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(*same))
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(same[0], other))


def test_regression_targets_are_not_stratified_but_still_split():
    y = np.random.default_rng(0).normal(size=50)
    assert class_labels(y) is None
    vals = np.concatenate([v for _, v in kfold_splits(y, 4, seed=0)])
    assert sorted(vals) == list(range(50))


def test_integral_floats_with_few_values_count_as_classes():
    assert class_labels(np.array([0.0, 1.0, 1.0, 0.0])) is not None
    assert class_labels(np.array([[1], [0], [1]])).tolist() == [1, 0, 1]


def test_impossible_k_is_an_error():
    with pytest.raises(ValueError, match="kfold 5"):
        kfold_splits(np.arange(4), 5, seed=0)
    with pytest.raises(ValueError):
        kfold_splits(np.arange(4), 1, seed=0)


def test_holdout_is_stratified_disjoint_and_covering():
    y = classes(n=200)
    train, val = holdout_split(y, 0.25, seed=3)
    assert sorted(np.concatenate([train, val])) == list(range(200))
    assert not set(train) & set(val)
    assert abs(len(val) - 50) <= 2
    for c in range(3):
        assert abs(np.sum(y[val] == c) - 0.25 * np.sum(y == c)) <= 1


def test_holdout_keeps_one_sample_on_each_side():
    train, val = holdout_split(np.array([0, 1, 2]), 0.01, seed=0)
    assert len(val) == 1 and len(train) == 2
    train, val = holdout_split(np.array([0, 1]), 0.99, seed=0)
    assert len(val) == 1 and len(train) == 1


def _digest(arrays) -> str:
    import hashlib

    h = hashlib.sha256()
    for a in arrays:
        h.update(np.asarray(a, dtype=np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


def test_the_splits_and_orders_are_the_ones_studies_already_ran():
    """Digests of splits and epoch orders that studies have trained on: the width of the
    index arrays must not change which samples a fold holds or the order of an epoch (a
    study resumed across versions trains its folds on the same samples, in order)."""
    from mpiopt.training.data import epoch_order
    from mpiopt.training.kfold import group_kfold_splits

    y = np.random.default_rng(0).choice(3, 10_007, p=[0.6, 0.3, 0.1])
    g = np.repeat(np.arange(9), [50, 90, 10, 300, 20, 80, 110, 7, 40])
    assert _digest([a for pair in kfold_splits(y, 5, 11) for a in pair]) == "1d8b8f3453952829"
    assert _digest([a for pair in kfold_splits(y, 3, 11, stratify=False)
                    for a in pair]) == "f8218dcffa5d66c0"
    assert _digest(holdout_split(y, 0.1, 3)) == "1842ffab0a6fd439"
    assert _digest([a for pair in group_kfold_splits(g, 3, 5) for a in pair]) == "12bf6e7502dd6a07"
    assert _digest([epoch_order(10_007, 9, 2),
                    epoch_order(10_007, 9, 2, window=100)]) == "25258bd56c55329d"


def test_index_arrays_take_four_bytes_an_index_and_folds_one_byte_a_sample():
    """Every rank holds them for all the samples: their width is memory on every rank."""
    from mpiopt.training.data import epoch_order
    from mpiopt.training.stream import index_dtype, nonzero_indices

    y = classes(n=1000)
    folds = kfold_splits(y, 4, seed=1)
    assert folds.fold.dtype == np.uint8
    assert {a.dtype for pair in folds for a in pair} == {np.dtype(np.int32)}
    assert {a.dtype for a in holdout_split(y, 0.2, seed=1)} == {np.dtype(np.int32)}
    assert epoch_order(1000, 1, 0).dtype == np.int32
    assert epoch_order(1000, 1, 0, window=64).dtype == np.int32
    assert index_dtype(2**31) == np.int64                 # past int32, the full width
    mask = np.random.default_rng(2).random(3_000_001) < 0.3   # more than one chunk
    assert np.array_equal(nonzero_indices(mask), np.flatnonzero(mask))
