"""Chunks of a gzip HDF5 dataset read raw and inflated by libdeflate, where that gives
exactly what h5py's own read gives.

Streaming a compressed file spends most of a sample's read inflating its chunk, on the
same cores that train (benchmarks/results/data_throughput.md). HDF5's gzip filter is
plain zlib, run through the zlib library; libdeflate (the `deflate` package) inflates the
same streams in well under half the CPU time, and releases the GIL while it does, so the
prefetch thread's reads overlap the training thread. So a chunk's stored bytes are read
as they are (`read_direct_chunk`, no filter run) and inflated here.

Only a pipeline this module can undo exactly takes that path: each filter deflate or
byte-shuffle (numpy undoes shuffle with one transpose), on a dataset of plain numbers.
Anything else (fletcher32, szip, lzf, a plugin filter, a chunk that was never written and
reads as the fill value), and any error on the way, is read by h5py: its read is the
reference, and the one whose errors name what went wrong. Without the `deflate` package
every read is h5py's.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

try:                       # the tensorflow extra installs it beside h5py
    from deflate import zlib_decompress
except ImportError:        # pragma: no cover - the fallback is h5py's read
    zlib_decompress = None

DEFLATE, SHUFFLE = 1, 2    # HDF5's filter ids (H5Z_FILTER_DEFLATE, H5Z_FILTER_SHUFFLE)


def chunk_reader(ds):
    """read(start, stop) -> the rows [start, stop) of dataset ds as an ndarray: its chunks
    inflated here when their filters allow (module docstring), else h5py's read."""
    layout = Layout.of(ds)
    if layout is None:
        return lambda start, stop: ds[start:stop]

    def read(start, stop):
        try:
            return layout.rows(ds.id, start, stop)
        except Exception:   # h5py decides: the fill value, or the error that names it
            return ds[start:stop]

    return read


@dataclass(frozen=True)
class Layout:
    """What reading a dataset's chunks needs: their shape, the dataset's, its dtype, and
    its filters in the order they were applied, as (id, element size)."""

    chunks: tuple
    shape: tuple
    dtype: np.dtype
    filters: tuple

    @classmethod
    def of(cls, ds) -> "Layout | None":
        """The layout of ds when this module can undo every filter of it and libdeflate is
        installed; else None."""
        if zlib_decompress is None or ds.chunks is None or ds.dtype.kind not in "biuf":
            return None
        plist = ds.id.get_create_plist()
        filters = []
        for i in range(plist.get_nfilters()):
            code, _, values, _ = plist.get_filter(i)
            if code not in (DEFLATE, SHUFFLE):
                return None
            size = int(values[0]) if code == SHUFFLE and values else ds.dtype.itemsize
            filters.append((code, size))
        return cls(tuple(ds.chunks), tuple(ds.shape), ds.dtype, tuple(filters))

    def rows(self, dsid, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop): the chunks they touch, each inflated and put in its place
        (a view of the one chunk, without a copy, where one chunk holds them all)."""
        chunks, shape = self.chunks, self.shape
        first, last = start // chunks[0], (stop - 1) // chunks[0]
        grids = [range(0, n, c) for n, c in zip(shape[1:], chunks[1:])]
        if first == last and all(len(g) == 1 for g in grids):
            lo = first * chunks[0]
            whole = (slice(start - lo, stop - lo),) + tuple(slice(0, n) for n in shape[1:])
            return self.chunk(dsid, (lo,) + (0,) * len(grids))[whole]
        out = np.empty((stop - start,) + shape[1:], self.dtype)
        for row in range(first, last + 1):
            lo = row * chunks[0]
            rows = slice(max(start, lo) - lo, min(stop, lo + chunks[0]) - lo)
            at = slice(lo + rows.start - start, lo + rows.stop - start)
            for rest in itertools.product(*grids):     # the chunk's corner past axis 0
                inner = tuple(slice(0, min(c, n - a))
                              for a, c, n in zip(rest, chunks[1:], shape[1:]))
                place = tuple(slice(a, a + s.stop) for a, s in zip(rest, inner))
                out[(at,) + place] = self.chunk(dsid, (lo,) + rest)[(rows,) + inner]
        return out

    def chunk(self, dsid, offset: tuple) -> np.ndarray:
        """The chunk at `offset`, whole (an edge chunk is stored at full size)."""
        mask, data = dsid.read_direct_chunk(offset)
        nbytes = int(np.prod(self.chunks)) * self.dtype.itemsize
        for i in reversed(range(len(self.filters))):
            if mask & (1 << i):            # this filter was skipped for this chunk
                continue
            code, size = self.filters[i]
            data = zlib_decompress(data, nbytes) if code == DEFLATE else unshuffle(data, size)
        if len(data) != nbytes:
            raise ValueError(f"chunk at {offset}: {len(data)} bytes, not {nbytes}")
        return np.frombuffer(data, self.dtype).reshape(self.chunks)


def unshuffle(data, size: int) -> np.ndarray:
    """HDF5's byte-shuffle undone: the buffer holds every element's first byte, then every
    second byte, and so on; bytes past the last whole element stay where they are."""
    raw = np.frombuffer(data, np.uint8)
    whole = len(raw) // size * size
    out = np.empty_like(raw)
    out[:whole] = raw[:whole].reshape(size, -1).T.ravel()
    out[whole:] = raw[whole:]
    return out
