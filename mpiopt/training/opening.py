"""Opening one data file: its format's Source, then its event weights and the selection.

`objective.data.selection` is applied here, when a file is opened: the events that pass
are the Source's samples (`select`), so every split, shuffle and batch is made over the
selected events only, and a read maps them back to the file's entries. The weights are
read beside the labels, one number per event, and checked here (finite numbers; the rule
that scales them is mpiopt.training.weights).
"""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

from mpiopt.errors import DataError
from mpiopt.training.rootfiles import open_root
from mpiopt.training.sources import COLUMNS, OPENERS, Reading, Source, check_labels, named
from mpiopt.training.stream import nonzero_indices


def open_source(kind: str, file: str, features="features", labels: str = "labels",
                tree: str = "Events", reading: Reading | None = None) -> Source:
    """The Source of one file (for npy: one directory); `reading` says what to read, else
    features, labels and tree do."""
    reading = reading or Reading(features, labels, tree)
    if not os.path.exists(file):
        raise DataError(f"{file}: no such file")
    with named(file, "opening"):
        if kind == "root":
            src = open_root(file, reading)
        else:
            src = OPENERS[kind](file, reading.features, reading.labels, reading.tree)
            src.columns = COLUMNS[kind](file)
    check_labels(src, reading.labels)
    src.events = src.n
    if reading.weights:
        src.weights = event_weights(src, reading.weights)
    if reading.selection:
        src = select(src, passing(src, reading.selection))
    return src


def event_weights(src: Source, name: str) -> np.ndarray:
    """objective.data.weights of one file: finite numbers, one per event, as float32 (the
    precision of the loss they scale); negative ones are kept (mpiopt.training.weights)."""
    where = "objective.data.weights"
    w = src.columns.get(src.file, where, name, src.n)
    bad = ~np.isfinite(w) if w.dtype.kind == "f" else np.zeros(len(w), bool)
    if bad.any():
        raise DataError(f"{src.file}: {where}: '{name}' holds {int(bad.sum())} NaN or "
                        f"infinite value(s), the first in event {int(np.argmax(bad))}")
    return np.asarray(w, dtype=np.float32)


def passing(src: Source, text: str) -> np.ndarray:
    """The entries of src's file that objective.data.selection keeps, in order."""
    from mpiopt.training.selection import Selection, SelectionError

    where = "objective.data.selection"
    try:
        selection = Selection(text)
        columns = {n: src.columns.get(src.file, where, n, src.n) for n in selection.names}
        keep = selection.evaluate(columns)
    except SelectionError as e:
        raise DataError(f"{src.file}: {where}: {e}") from None
    return nonzero_indices(keep)


def select(src: Source, keep: np.ndarray) -> Source:
    """The Source of the entries `keep` (increasing) of src's file: sample i is entry
    keep[i]. Memory-mapped features are indexed through keep; the others read the range
    of entries a request spans and take the kept ones; block boundaries move with them."""
    reader = None if src.reader is None else _kept_reader(src, keep)
    bounds = None
    if src.bounds is not None:
        bounds = np.unique(np.r_[0, np.searchsorted(keep, src.bounds)]).astype(np.int64)
    return replace(src, n=len(keep), labels=np.asarray(src.labels[keep]),
                   weights=None if src.weights is None else src.weights[keep],
                   mapped=None if src.mapped is None else Kept(src.mapped, keep),
                   reader=reader, bounds=bounds,
                   inputs={k: select(s, keep) for k, s in src.inputs.items()})


def _kept_reader(src: Source, keep: np.ndarray):
    read, shape, dtype = src.reader, src.sample_shape, src.dtype

    def kept(start, stop):
        if stop <= start:
            return np.empty((0,) + tuple(shape), dtype)
        first = int(keep[start])
        rows = read(first, int(keep[stop - 1]) + 1)
        return rows[keep[start:stop] - first]

    return kept


class Kept:
    """A memory-mapped array seen through the selection: row i is base[keep[i]]."""

    def __init__(self, base, keep: np.ndarray):
        self.base, self.keep = base, keep
        self.shape = (len(keep),) + tuple(base.shape[1:])
        self.dtype, self.ndim = base.dtype, len(self.shape)

    def __len__(self) -> int:
        return len(self.keep)

    def __getitem__(self, key):
        return self.base[self.keep[key]]
