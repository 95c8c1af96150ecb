"""K-fold and holdout splits: shuffled with the trial seed, stratified when labels are classes.

Every rank computes the same splits from the same seed, so nothing is communicated.
Stratification deals the shuffled members of each class round-robin over the folds, with
the dealing continuing from one class to the next: every fold gets each class's share to
within one sample and the fold sizes differ by at most one.

Every rank holds these indices for all the samples, so they are kept small: int32 indices
(while the samples number under 2^31), a fold number of one byte per sample, and the K
folds' index arrays made one fold at a time (`Folds`), when that fold is trained. The
indices are the same numbers in any width, so the splits do not change.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mpiopt.training.stream import index_dtype, nonzero_indices


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
        return y                  # classes as they are: stratifying only compares them
    if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
        if len(np.unique(y)) <= min(100, max(2, len(y) // 2)):
            return y.astype(np.int64)
    return None


class Folds(Sequence):
    """The K (train indices, validation indices) pairs of a fold number per sample, each
    pair made when it is asked for."""

    def __init__(self, fold: np.ndarray, k: int):
        self.fold, self.k = fold, k

    def __len__(self) -> int:
        return self.k

    def __getitem__(self, f):
        if not -self.k <= f < self.k:
            raise IndexError(f)
        f %= self.k
        return nonzero_indices(self.fold != f), nonzero_indices(self.fold == f)


def _fold_of(y, k: int, seed: int, stratify: bool) -> np.ndarray:
    n = len(y)
    rng = np.random.default_rng(int(seed) % 2**32)
    labels = class_labels(y) if stratify else None
    fold = np.empty(n, dtype=np.min_scalar_type(k - 1))
    counting = np.arange(n, dtype=index_dtype(n))
    if labels is None:
        fold[rng.permutation(counting)] = counting % k
        return fold
    dealt = 0
    for c in np.unique(labels):
        members = rng.permutation(nonzero_indices(labels == c))
        fold[members] = (dealt + counting[:len(members)]) % k
        dealt += len(members)
    return fold


def kfold_splits(y, k: int, seed: int, stratify: bool = True) -> Folds:
    """K (train indices, validation indices) pairs; the validation parts are disjoint and
    together cover every sample once."""
    n = len(y)
    if k < 2 or k > n:
        raise ValueError(f"kfold {k} needs 2 <= k <= the number of samples ({n})")
    return Folds(_fold_of(y, k, seed, stratify), k)


def holdout_split(y, fraction: float, seed: int, stratify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, validation indices) with about `fraction` of the samples (of each
    class, when stratified) held out; at least one sample on each side."""
    n = len(y)
    if n < 2:
        raise ValueError("a holdout split needs at least 2 samples")
    rng = np.random.default_rng(int(seed) % 2**32)
    labels = class_labels(y) if stratify else None
    classes = [None] if labels is None else np.unique(labels)
    val = []
    for c in classes:   # one class's indices at a time: only its held-out part is kept
        members = rng.permutation(np.arange(n, dtype=index_dtype(n)) if c is None
                                  else nonzero_indices(labels == c))
        val.append(members[: int(round(fraction * len(members)))].copy())
        del members
    val = np.concatenate(val)
    if len(val) == 0:
        val = rng.permutation(np.arange(n, dtype=index_dtype(n)))[:1]
    elif len(val) == n:
        val = val[1:]
    val = np.sort(val)
    train = np.ones(n, dtype=bool)
    train[val] = False
    # A mask of n bytes, not setdiff1d: that sorts a copy of every index to produce the
    # same sorted train indices.
    return nonzero_indices(train), val


def group_kfold_splits(groups, k: int, seed: int) -> Folds:
    """K folds of whole groups (files, for data.split_by: file): the groups are shuffled
    with the seed and dealt round-robin, so fold sizes in files differ by at most one."""
    ids = np.unique(groups)
    if k < 2 or k > len(ids):
        raise ValueError(f"kfold {k} with data.split_by: file needs 2 <= k <= the number of "
                         f"files ({len(ids)})")
    rng = np.random.default_rng(int(seed) % 2**32)
    fold_of = np.empty(len(ids), dtype=np.min_scalar_type(k - 1))
    fold_of[rng.permutation(len(ids))] = np.arange(len(ids)) % k
    return Folds(fold_of[np.searchsorted(ids, groups)], k)


def group_holdout_split(groups, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """About `fraction` of the groups held out whole; at least one group on each side."""
    ids = np.unique(groups)
    if len(ids) < 2:
        raise ValueError("a holdout with data.split_by: file needs at least 2 files")
    rng = np.random.default_rng(int(seed) % 2**32)
    n_val = min(len(ids) - 1, max(1, int(round(fraction * len(ids)))))
    held = np.isin(groups, rng.permutation(ids)[:n_val])
    return nonzero_indices(~held), nonzero_indices(held)


def chunk_classes(y, starts: np.ndarray) -> np.ndarray | None:
    """Each chunk's most frequent class (chunk c: samples starts[c]:starts[c+1]), what
    chunk folds stratify by; None when y looks like a regression target."""
    labels = class_labels(y)
    if labels is None:
        return None
    values, inverse = np.unique(labels, return_inverse=True)
    counts = np.stack([np.add.reduceat((inverse == c).astype(np.int64), starts[:-1])
                       for c in range(len(values))], axis=1)
    return np.argmax(counts, axis=1)


def chunk_kfold_splits(y, starts: np.ndarray, k: int, seed: int) -> Folds:
    """K folds of whole chunks (data.split_by: auto over files read by chunk): the chunks
    are dealt to the folds as kfold_splits deals samples (shuffled with the seed,
    stratified by each chunk's most frequent class), so fold sizes in chunks differ by at
    most one; a chunk is then decompressed only by the folds that train or validate on it."""
    units = len(starts) - 1
    if k < 2 or k > units:
        raise ValueError(f"kfold {k} over whole chunks needs 2 <= k <= the number of chunks "
                         f"({units})")
    major = chunk_classes(y, starts)
    fold = _fold_of(np.zeros(units, np.int64) if major is None else major, k, seed,
                    major is not None)
    return Folds(np.repeat(fold, np.diff(starts)), k)


def chunk_holdout_split(y, starts: np.ndarray, fraction: float,
                        seed: int) -> tuple[np.ndarray, np.ndarray]:
    """About `fraction` of the chunks held out whole, as holdout_split holds out samples
    (stratified by each chunk's most frequent class); at least one chunk on each side."""
    units = len(starts) - 1
    major = chunk_classes(y, starts)
    _, held = holdout_split(np.zeros(units, np.int64) if major is None else major, fraction,
                            seed, stratify=major is not None)
    mask = np.zeros(units, bool)
    mask[held] = True
    mask = np.repeat(mask, np.diff(starts))
    return nonzero_indices(~mask), nonzero_indices(mask)
