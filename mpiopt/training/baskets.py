"""Flat ROOT branches whose baskets are stored uncompressed, read in place by sample.

An uncompressed basket of a flat numeric branch is the TKey+TBasket header (`fKeylen`
bytes) followed by the entries' values, big-endian, one after another: `fBasketSeek`
says where the basket starts, `fBasketEntry` which entries it holds. `BasketArray` maps
the file once (np.memmap) and serves `x[indices]` and `x[start:stop]` by copying just
those entries out of their baskets, byte-swapped to native order in the same copy: the
page cache holds the file once per node, whatever the number of ranks, as it does for a
contiguous HDF5 dataset.

The rule (`mapped_branches` returns None, and uproot reads the file, otherwise): every
requested branch is interpreted as a plain dtype (uproot's AsDtype, a fixed shape per
entry, big-endian as ROOT writes it, read as the same numbers in native order), has no
entry offsets (`fEntryOffsetLen` 0) and no baskets embedded in the TTree's own record,
its baskets cover exactly the tree's entries, and each basket, by its key's header read
from the file, is the size the branch records (`fBasketBytes`), lies inside the file, is
stored uncompressed (`fObjlen == fNbytes - fKeylen`) and holds exactly its entries'
values (`fObjlen == entries * bytes per entry`). A file written with compression fails
the rule at its first basket that compression shrank; it is read through uproot (which
decompresses whole baskets), all of it: one reader per file keeps the reads simple.
"""
from __future__ import annotations

import os

import numpy as np


class BasketArray:
    """The branches' values side by side, one row per entry, read from the mapped file."""

    def __init__(self, columns: list[tuple[np.ndarray, list[np.ndarray]]], n: int):
        # per branch: (first entry of each basket and n at the end, each basket's values
        # as a big-endian (entries, width) view of the mapped file)
        self.columns = columns
        widths = [views[0].shape[1] for _, views in columns]
        self.edges = np.cumsum([0] + widths)
        self.dtype = np.result_type(*(views[0].dtype.newbyteorder("=") for _, views in columns))
        self.shape = (n, int(self.edges[-1]))
        self.ndim = 2

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step == 1:
                return self._range(start, max(start, stop))
            key = np.arange(start, stop, step)
        idx = np.asarray(key, dtype=np.int64)
        if idx.ndim == 0:
            return self[idx.reshape(1)][0]
        if len(idx) and (idx.min() < -len(self) or idx.max() >= len(self)):
            raise IndexError(f"index out of range for {len(self)} entries")
        return self._gather(np.where(idx < 0, idx + len(self), idx))

    def _range(self, start: int, stop: int) -> np.ndarray:
        out = np.empty((stop - start, self.shape[1]), self.dtype)
        for c, (starts, views) in enumerate(self.columns):
            lo, hi = self.edges[c], self.edges[c + 1]
            first = int(np.searchsorted(starts, start, side="right") - 1)
            for b in range(first, len(views)):
                b0 = int(starts[b])
                if b0 >= stop:
                    break
                a, z = max(start, b0), min(stop, int(starts[b + 1]))
                out[a - start:z - start, lo:hi] = views[b][a - b0:z - b0]
        return out

    def _gather(self, idx: np.ndarray) -> np.ndarray:
        """Rows idx (any order): each basket's rows taken in one step, in entry order."""
        out = np.empty((len(idx), self.shape[1]), self.dtype)
        if len(idx) == 0:
            return out
        order = None if np.all(idx[1:] >= idx[:-1]) else np.argsort(idx, kind="stable")
        sidx = idx if order is None else idx[order]
        rows = out if order is None else np.empty_like(out)
        for c, (starts, views) in enumerate(self.columns):
            lo, hi = self.edges[c], self.edges[c + 1]
            first = int(np.searchsorted(starts, sidx[0], side="right") - 1)
            last = int(np.searchsorted(starts, sidx[-1], side="right") - 1)
            cuts = np.searchsorted(sidx, starts[first:last + 2])
            for b, (a, z) in enumerate(zip(cuts[:-1], cuts[1:]), start=first):
                if z > a:
                    rows[a:z, lo:hi] = views[b][sidx[a:z] - starts[b]]
        if order is not None:
            out[order] = rows
        return out


def mapped_branches(file: str, tree, branches: list[str]) -> BasketArray | None:
    """The branches of `tree` (an uproot TTree of `file`) as a BasketArray, or None where
    the rule in the module docstring does not hold (uproot reads them then)."""
    import uproot

    n = int(tree.num_entries)
    size = os.path.getsize(file)
    if n == 0 or size == 0:
        return None
    # a plain ndarray over the map: slices of an np.memmap pay its subclass on each one
    raw = np.asarray(np.memmap(file, dtype=np.uint8, mode="r"))
    columns = []
    for name in branches:
        branch = tree[name]
        interp = branch.interpretation
        if (type(interp) is not uproot.AsDtype or branch.member("fEntryOffsetLen")
                or branch.embedded_baskets):
            return None
        views = _basket_views(raw, branch, interp, n, size)
        if views is None:
            return None
        columns.append(views)
    return BasketArray(columns, n)


def _basket_views(raw, branch, interp, n: int, size: int):
    """(first entries, big-endian views) of one branch's baskets, or None (the rule)."""
    count = int(branch.member("fWriteBasket"))
    seeks = np.asarray(branch.member("fBasketSeek"))[:count].astype(np.int64)
    nbytes = np.asarray(branch.member("fBasketBytes"))[:count].astype(np.int64)
    starts = np.asarray(branch.member("fBasketEntry"))[:count + 1].astype(np.int64)
    if count == 0 or len(starts) != count + 1 or starts[0] != 0 or starts[-1] != n:
        return None
    dtype = np.dtype(interp.from_dtype)
    base = dtype.base
    width = int(np.prod(dtype.shape, dtype=np.int64))
    if base.byteorder not in ">|" or np.dtype(interp.to_dtype) != dtype.newbyteorder("="):
        return None
    views = []
    for seek, length, b0, b1 in zip(seeks, nbytes, starts[:-1], starts[1:]):
        if seek < 0 or seek + 16 > size or seek + length > size:
            return None
        head = raw[seek:seek + 16]
        total = int(head[0:4].view(">i4")[0])
        objlen = int(head[6:10].view(">i4")[0])
        keylen = int(head[14:16].view(">i2")[0])
        values = int(b1 - b0) * width * base.itemsize
        if total != length or objlen != total - keylen or objlen != values:
            return None
        at = int(seek) + keylen
        views.append(raw[at:at + values].view(base)
                     .reshape(int(b1 - b0), width))
    return starts, views
