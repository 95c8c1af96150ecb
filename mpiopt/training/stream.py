"""Features that stay in their files: a list of Sources read as one array, by sample.

`FileArray` is the concatenation of the files' features, `View` a subset of it (a fold's
training or validation samples); both look like the arrays the algorithms index
(`len`, `shape`, `dtype`, `x[indices]`, `x[start:stop]`), and indexing reads just those
samples. So K-fold splits, epoch orders and batch shards stay the index arithmetic of the
in-memory path, computed identically on every rank from the seed; only the reads differ.

`prefetched` reads the next batches on a thread while the model trains on this one.

Shuffles (`data.shuffle`):
- `exact`: a permutation of all the training samples per epoch (the in-memory order);
  memory-mapped files serve it from the page cache;
- `window`: the training samples, in file order, are cut into windows of
  `data.shuffle_window` consecutive samples; each epoch takes the windows in a random
  order and permutes the samples inside each one. A batch then reads from one or two
  windows: contiguous reads, which compressed HDF5 and ROOT need to be fast. Each global
  batch's indices are then put in ascending order (the same samples, so the same batch
  gradient up to rounding): a rank's shard of it is a run of that order, so it reads
  about its share of the window's chunks rather than every one of them, and the ranks of
  a group do not each decompress the whole data every epoch. A batch that spans two
  windows (the windows after the short last one) is ordered by its samples' offsets
  inside their windows instead, so a shard takes the same part of both (`_arrange`).
"""
from __future__ import annotations

import queue
import threading
from collections import OrderedDict

import numpy as np

from mpiopt.errors import DataError

BLOCK = 1024                 # samples read at least at a time from a file not memory-mapped
BLOCK_CACHE_BYTES = 1 << 27  # per process: those blocks kept for the next batches (128 MiB)
PREFETCH = 4                 # batches read ahead by the prefetch thread


class FileArray:
    """The features of several files, in file order, as one array read on demand."""

    def __init__(self, sources):
        if not sources:
            raise DataError("data: no files")
        first = sources[0]
        for s in sources[1:]:
            if s.sample_shape != first.sample_shape:
                raise DataError(f"{s.file}: features have shape {s.sample_shape} per sample "
                                f"but {first.file} has {first.sample_shape}")
        self.sources = list(sources)
        self.starts = np.cumsum([0] + [s.n for s in sources])
        self.dtype = np.result_type(*(s.dtype for s in sources))
        self.shape = (int(self.starts[-1]),) + tuple(first.sample_shape)
        self.ndim = len(self.shape)
        self.nbytes = int(self.starts[-1]) * first.sample_bytes
        self._blocks: OrderedDict = OrderedDict()
        self._bounds: dict = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.gather(np.arange(*key.indices(len(self))))
        if np.isscalar(key):
            return self.gather(np.array([key]))[0]
        return self.gather(np.asarray(key))

    def gather(self, idx: np.ndarray) -> np.ndarray:
        """The samples at global indices idx (any order), each file read once, in order."""
        out = np.empty((len(idx),) + self.shape[1:], self.dtype)
        if len(idx) == 0:
            return out
        order = np.argsort(idx, kind="stable")
        sidx = idx[order]
        files = np.searchsorted(self.starts, sidx, side="right") - 1
        bounds = np.flatnonzero(np.diff(files)) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(sidx)]):
            f = int(files[lo])
            local = sidx[lo:hi] - self.starts[f]
            out[order[lo:hi]] = self._take(f, local)
        _check_finite(out, idx, self)
        return out

    def _take(self, f: int, local: np.ndarray) -> np.ndarray:
        src = self.sources[f]
        if src.mapped is not None:
            if local[-1] - local[0] + 1 == len(local):     # contiguous: one slice
                return src.read(int(local[0]), int(local[-1]) + 1)
            return src.mapped[local]
        edges = self._edges(f)
        blocks = np.searchsorted(edges, local, side="right") - 1
        cut = np.flatnonzero(np.diff(blocks)) + 1     # local is sorted: a run per block
        parts = []
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(local)]):
            b = int(blocks[lo])
            parts.append(self._block(f, b, edges)[local[lo:hi] - edges[b]])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _edges(self, f: int) -> np.ndarray:
        if f not in self._bounds:
            self._bounds[f] = self.sources[f].blocks(BLOCK)
        return self._bounds[f]

    def _block(self, f: int, b: int, edges) -> np.ndarray:
        """Block b of file f (whole HDF5 chunks or ROOT clusters: a range read decompresses
        them whole anyway), kept in a small LRU cache (the prefetch thread and validation
        may both read)."""
        with self._lock:
            if (f, b) in self._blocks:
                self._blocks.move_to_end((f, b))
                return self._blocks[(f, b)]
        rows = self.sources[f].read(int(edges[b]), int(edges[b + 1]))
        with self._lock:
            self._blocks[(f, b)] = rows
            while (len(self._blocks) > 1
                   and sum(r.nbytes for r in self._blocks.values()) > BLOCK_CACHE_BYTES):
                self._blocks.popitem(last=False)
        return rows

    def locate(self, i: int) -> tuple[str, int]:
        """(file, sample index inside it) of global sample i."""
        f = int(np.searchsorted(self.starts, i, side="right") - 1)
        return self.sources[f].file, int(i - self.starts[f])


def _check_finite(out: np.ndarray, idx: np.ndarray, array: FileArray) -> None:
    """A NaN or an infinity would make every weight NaN (see data.check_finite): refused
    where it is read, naming the file and the sample."""
    if out.dtype.kind != "f" or np.isfinite(out).all():
        return
    bad = np.flatnonzero(~np.isfinite(out.reshape(len(out), -1)).all(axis=1))[0]
    file, local = array.locate(int(idx[bad]))
    raise DataError(f"{file}: features of sample {local} hold NaN or infinite values; training "
                    f"on them makes the model's weights NaN")


class View:
    """Samples `indices` of a FileArray, of another View, or of an array in memory (a
    fold's features or labels: gathered batch by batch, never copied whole), read on
    demand."""

    def __init__(self, base, indices):
        if isinstance(base, View):
            base, indices = base.base, base.indices[indices]
        elif isinstance(indices, slice):
            indices = np.arange(*indices.indices(len(base)))
        self.base, self.indices = base, np.asarray(indices)
        self.shape = (len(self.indices),) + tuple(base.shape[1:])
        self.dtype, self.ndim = base.dtype, base.ndim

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, key):
        if np.isscalar(key):
            return self[[key]][0]
        idx = self.indices[key]
        return self.base.gather(idx) if isinstance(self.base, FileArray) else self.base[idx]


class Joined:
    """Arrays in memory one after the other, as one array gathered on demand: the refit's
    training and validation features (Dataset.merged) without a concatenated copy of
    them on every rank, which would hold the data twice."""

    def __init__(self, first, second):
        if tuple(first.shape[1:]) != tuple(second.shape[1:]):
            raise DataError(f"the validation features have shape {tuple(second.shape[1:])} per "
                            f"sample, the training features {tuple(first.shape[1:])}")
        self.parts, self.split = (first, second), len(first)
        self.shape = (len(first) + len(second),) + tuple(first.shape[1:])
        self.dtype = np.result_type(first.dtype, second.dtype)
        self.ndim = len(self.shape)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key):
        if np.isscalar(key):
            return self[np.array([key])][0]
        idx = np.arange(*key.indices(len(self))) if isinstance(key, slice) else np.asarray(key)
        out = np.empty((len(idx),) + self.shape[1:], self.dtype)
        first = idx < self.split
        out[first] = self.parts[0][idx[first]]
        out[~first] = self.parts[1][idx[~first] - self.split]
        return out


def take(x, idx):
    """x's samples idx as a View, nothing read or copied yet (a fold of data in memory
    is index arrays over the one copy: data's module docstring); for the holders of
    several arrays (named inputs, weighted labels), their own subset."""
    if hasattr(x, "subset"):
        return x.subset(idx)
    return View(x, idx)


def rows(batch) -> int:
    """The samples in a batch: an array's length, or a named-inputs dict's arrays'."""
    if isinstance(batch, dict):
        return len(next(iter(batch.values()))) if batch else 0
    return len(batch)


def file_numbers(sources) -> np.ndarray:
    """The number of each sample's file, in the narrowest integer type that holds it."""
    dtype = np.min_scalar_type(max(0, len(sources) - 1))
    return np.repeat(np.arange(len(sources), dtype=dtype), [s.n for s in sources])


def streamed(x) -> bool:
    """Whether x is read from its files (features, or named inputs that hold such)."""
    return (isinstance(x, FileArray) or (isinstance(x, View) and isinstance(x.base, FileArray))
            or bool(getattr(x, "streams", False)))


def window_order(n: int, seed: int, epoch: int, window: int,
                 batch: int | None = None) -> np.ndarray:
    """The windowed shuffle in the module docstring; the same on every rank. batch: the
    global batch size, whose batches are put in ascending order."""
    rng = np.random.default_rng([int(seed) % 2**32, int(epoch), 1])
    dtype = index_dtype(n)
    order = np.empty(n, dtype)
    at = 0
    for s in rng.permutation(np.arange(0, n, window)):
        size = min(s + window, n) - s
        order[at:at + size] = rng.permutation(np.arange(s, s + size, dtype=dtype))
        at += size
    if batch:
        _arrange(order, n, window, batch)
    return order


def _arrange(order: np.ndarray, n: int, window: int, batch: int) -> None:
    """Each batch of a window order in place, by its samples' offsets inside their
    windows (relative to the window's length: the last window may be shorter), then by
    index: ascending inside one window, so a rank's shard is a run of it (module
    docstring); a batch that spans two windows (after the short one) is interleaved, so
    that a shard still takes the same part of each window as its batches inside them do
    (the lower half of each for the first of two ranks), not samples spread over all of
    one window's chunks. Only the order inside batches changes: the same batches."""
    step = max(1, _WHERE_CHUNK // batch) * batch      # a bounded temporary
    for at in range(0, n, step):
        part = order[at:at + step]
        first = part // window * window
        offset = (part - first).astype(np.int64) * window // np.minimum(window, n - first)
        key = offset * n + part
        full = len(part) - len(part) % batch
        rows = np.argsort(key[:full].reshape(-1, batch), axis=1, kind="stable")
        part[:full] = np.take_along_axis(part[:full].reshape(-1, batch), rows, axis=1).ravel()
        part[full:] = part[full:][np.argsort(key[full:], kind="stable")]


# ------------------------------------------------------------------ index arrays
# Every rank keeps index arrays over all the samples (splits, each epoch's order), so
# they take 4 bytes an index while the samples number under 2^31. The same numbers in
# any width index the same samples.
_WHERE_CHUNK = 1 << 20


def index_dtype(n: int) -> np.dtype:
    return np.dtype(np.int32 if n < 2**31 else np.int64)


def nonzero_indices(mask: np.ndarray) -> np.ndarray:
    """np.flatnonzero(mask) in index_dtype(len(mask)), without its int64 array of them
    all (a chunk of the mask at a time)."""
    mask = np.asarray(mask).ravel()
    out = np.empty(int(np.count_nonzero(mask)), index_dtype(len(mask)))
    at = 0
    for start in range(0, len(mask), _WHERE_CHUNK):
        part = np.flatnonzero(mask[start:start + _WHERE_CHUNK])
        out[at:at + len(part)] = part + start
        at += len(part)
    return out


# ----------------------------------------------------------------------- prefetch
_DONE = object()


def prefetched(x, y, parts, depth: int = PREFETCH, failures: list | None = None):
    """(x[p], y[p]) for each index array p in parts.

    failures: a read that fails is appended there and the remaining batches come empty,
    so that this rank stays in step with its communicator's collectives until the epoch's
    end, where `raise_together` fails the trial on every rank at once (a rank that raised
    in the middle of an epoch would leave the others waiting inside an Allreduce).
    Without it, the failure is raised at once. For streamed features a daemon thread
    reads up to `depth` batches ahead into a bounded queue. The thread can neither keep
    the process alive (daemon) nor outlive its consumer by more than one read: when the
    consumer stops (the epoch ends, an exception, a prune) it sets `stop`, and the thread
    checks it between reads and while its queue is full. A failed read is raised in the
    consumer, where the batch was wanted."""
    parts = list(parts)
    batches = _read_ahead(x, y, parts, depth)
    if failures is None:
        yield from batches
        return
    done = 0
    try:
        for item in batches:
            done += 1
            yield item
    except Exception as exc:  # handed on through `failures`, raised at the epoch's end
        failures.append(exc)
        empty = (x[:0], y[:0])
        for _ in range(len(parts) - done):
            yield empty


def raise_together(comm, failures: list) -> None:
    """After an epoch: if a read failed on any rank, every rank raises here (the rank
    that failed its own error, the others one that says so)."""
    from mpiopt.errors import OTHERS_FAILED

    failed = comm.allreduce(1 if failures else 0) if comm.Get_size() > 1 else len(failures)
    if failures:
        error, failures[:] = failures[0], []
        raise error
    if failed:
        raise RuntimeError(f"{failed} {OTHERS_FAILED}")


def _read_ahead(x, y, parts, depth):
    if not streamed(x) or len(parts) < 2:
        for p in parts:
            yield x[p], y[p]
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    thread = threading.Thread(target=_produce, args=(x, y, parts, q, stop),
                              name="mpiopt-prefetch", daemon=True)
    thread.start()
    try:
        for _ in parts:
            item = _next(q, thread)
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


def _produce(x, y, parts, q, stop) -> None:
    try:
        for p in parts:
            if stop.is_set():
                return
            _put(q, (x[p], y[p]), stop)
    except BaseException as exc:  # handed to the consumer, raised there
        _put(q, exc, stop)


def _put(q, item, stop) -> None:
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def _next(q, thread):
    while True:
        try:
            return q.get(timeout=1.0)
        except queue.Empty:
            if not thread.is_alive() and q.empty():
                raise RuntimeError("the data prefetch thread ended without a batch or an error")
