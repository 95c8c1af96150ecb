"""K-fold and holdout splits: shuffled with the trial seed, stratified when labels are classes.

Every rank computes the same splits from the same seed, so nothing is communicated.
Stratification deals the shuffled members of each class round-robin over the folds, with
the dealing continuing from one class to the next: every fold gets each class's share to
within one sample and the fold sizes differ by at most one.
"""
from __future__ import annotations

import numpy as np


def class_labels(y) -> np.ndarray | None:
    """Integer class labels when y holds classes (integers, booleans, one-hot rows, or
    integral floats with few distinct values); None when y looks like a regression target."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim == 2:
        one_hot = np.isin(y, (0, 1)).all() and np.all(y.sum(axis=1) == 1)
        return np.argmax(y, axis=1) if one_hot else None
    if y.ndim != 1:
        return None
    if y.dtype.kind in "biu":
        return y.astype(np.int64)
    if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
        if len(np.unique(y)) <= min(100, max(2, len(y) // 2)):
            return y.astype(np.int64)
    return None


def _fold_of(y, k: int, seed: int, stratify: bool) -> np.ndarray:
    n = len(y)
    rng = np.random.default_rng(int(seed) % 2**32)
    labels = class_labels(y) if stratify else None
    fold = np.empty(n, dtype=np.int64)
    if labels is None:
        fold[rng.permutation(n)] = np.arange(n) % k
        return fold
    dealt = 0
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        fold[members] = (dealt + np.arange(len(members))) % k
        dealt += len(members)
    return fold


def kfold_splits(y, k: int, seed: int, stratify: bool = True) -> list[tuple[np.ndarray, np.ndarray]]:
    """K (train indices, validation indices) pairs; the validation parts are disjoint and
    together cover every sample once."""
    n = len(y)
    if k < 2 or k > n:
        raise ValueError(f"kfold {k} needs 2 <= k <= the number of samples ({n})")
    fold = _fold_of(y, k, seed, stratify)
    return [(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(k)]


def holdout_split(y, fraction: float, seed: int, stratify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, validation indices) with about `fraction` of the samples (of each
    class, when stratified) held out; at least one sample on each side."""
    n = len(y)
    if n < 2:
        raise ValueError("a holdout split needs at least 2 samples")
    rng = np.random.default_rng(int(seed) % 2**32)
    labels = class_labels(y) if stratify else None
    groups = [np.arange(n)] if labels is None else [np.flatnonzero(labels == c) for c in np.unique(labels)]
    val = []
    for members in groups:
        members = rng.permutation(members)
        val.append(members[: int(round(fraction * len(members)))])
    val = np.concatenate(val)
    if len(val) == 0:
        val = rng.permutation(n)[:1]
    elif len(val) == n:
        val = val[1:]
    val = np.sort(val)
    train = np.ones(n, dtype=bool)
    train[val] = False
    # A mask of n bytes, not setdiff1d: that sorts a copy of every index (several times
    # n x 8 bytes at once on each rank) to produce the same sorted train indices.
    return np.flatnonzero(train), val


def group_kfold_splits(groups, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """K folds of whole groups (files, for data.split_by: file): the groups are shuffled
    with the seed and dealt round-robin, so fold sizes in files differ by at most one."""
    ids = np.unique(groups)
    if k < 2 or k > len(ids):
        raise ValueError(f"kfold {k} with data.split_by: file needs 2 <= k <= the number of "
                         f"files ({len(ids)})")
    rng = np.random.default_rng(int(seed) % 2**32)
    fold_of = np.empty(len(ids), dtype=np.int64)
    fold_of[rng.permutation(len(ids))] = np.arange(len(ids)) % k
    fold = fold_of[np.searchsorted(ids, groups)]
    return [(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(k)]


def group_holdout_split(groups, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """About `fraction` of the groups held out whole; at least one group on each side."""
    ids = np.unique(groups)
    if len(ids) < 2:
        raise ValueError("a holdout with data.split_by: file needs at least 2 files")
    rng = np.random.default_rng(int(seed) % 2**32)
    n_val = min(len(ids) - 1, max(1, int(round(fraction * len(ids)))))
    held = np.isin(groups, rng.permutation(ids)[:n_val])
    return np.flatnonzero(~held), np.flatnonzero(held)
