"""Training data: from a Python loader, or file lists (npz, .npy, HDF5, ROOT).

K-fold splits, per-epoch shuffles and batch shards are index arithmetic that every rank
computes identically from the seed, with no data ever sent over MPI. Each rank holds the
labels in memory once (stratified folds need them all; the files' own are memory-mapped
where the format allows), and its index arrays at 4 bytes an index (stream.index_dtype).
The features are either read into memory on every rank, or streamed: left in their
files and read by sample (mpiopt.training.stream), memory-mapped where the format allows
so that the ranks of a node share one copy in the page cache.

In memory, the data are held once per node by the ranks of a training communicator (a
group): the files are read straight into one array (each file's samples into their place,
a block at a time: no per-file arrays concatenated, which would hold the data twice at
the load's peak), in node-shared memory that the node's first rank fills and the others
read in place (mpiopt.training.shared, which says why the ranks of different groups do not
share it); a fold's training and validation sets are views of it (stream.View: index
arrays, the samples gathered batch by batch), not copies. `data.in_memory: auto` (the
default) keeps the features in memory while (ranks on the node) x (the data's bytes) is
at most MEMORY_SHARE of the node's memory (or its cgroup's limit), and no more than a
rank's RLIMIT_AS/RLIMIT_DATA; past it they stream. The rule counts a copy per rank, as if
every group had one rank on the node (the most copies a node can hold), since the groups'
layout is not known where the data are read. The rest of the node is for the ranks'
runtimes, models and batches, and for whatever else runs there. `true` and `false` force
either path. Both give the same splits and the same batches, so the same trial values.

`data.shuffle: auto` and `data.split_by: auto` (the defaults) follow the files: for files
read by chunk (chunked or compressed HDF5, compressed ROOT baskets, np.savez_compressed)
a window shuffle and splits of whole chunks, else an exact shuffle and splits by sample
(mpiopt.training.chunks says why). The choice is made from the files, not from the
in-memory/streamed path, so both paths shuffle and split alike; `describe` says it at the
study's start.

What the events hold is read the same way in either path: the selection keeps a file's
passing entries as it is opened (mpiopt.training.opening), so splits and shuffles run over
selected events; collections make the features named inputs (mpiopt.training.inputs);
the event weights are scaled once over all the selected events, before any split
(mpiopt.training.weights).

Data are read once per process and kept for the next trials of the same study (the key
is the data section of the spec). The size and modification time of every file are
recorded when it is first opened; a file that changes later fails the trial that finds
it, naming the file, rather than mixing two versions of the data in one study.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mpiopt.errors import DataError
from mpiopt.training.chunks import describe_chunks, shuffle_window, split_chunks
from mpiopt.training.inputs import FLAT, Inputs, joined
from mpiopt.training.opening import open_source
from mpiopt.training.shared import NodeShare
from mpiopt.training.sources import Reading
from mpiopt.training.stream import FileArray, file_numbers, index_dtype, streamed, window_order
from mpiopt.training.weights import scaled, weighted
from mpiopt.training.wholefiles import (  # noqa: F401  (read_*, write_hdf5: the loaders')
    check_pair, expand, read_hdf5, read_npz, write_hdf5)


@dataclass
class Dataset:
    """Training arrays and, when the data brought one, a separate validation set. x is an
    array (in memory or streamed), or named Inputs (objective.data.collections); w the
    event weights (objective.data.weights, balance_classes), or None."""

    x: np.ndarray
    y: np.ndarray
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None
    groups: np.ndarray | None = None   # split_by: file: the file number of each sample
    w: np.ndarray | None = None
    w_val: np.ndarray | None = None
    window: int | None = None          # data.shuffle as resolved: samples per window, or exact
    chunks: np.ndarray | None = None   # split_by: auto over files read by chunk: where each starts
    held: object = None                # the node-shared memory the arrays live in, kept

    @property
    def has_validation(self) -> bool:
        return self.x_val is not None

    @property
    def targets(self):
        """The labels with their weights (what a batch's loss takes), or the labels alone."""
        return weighted(self.y, self.w)

    def merged(self) -> "Dataset":
        """Training and validation samples as one training set (training.refit): the
        features gathered from both where they are (inputs.joined), not copied into one
        array per rank; the labels and weights (a few bytes a sample) concatenated."""
        if not self.has_validation:
            return self
        w = None if self.w is None else np.concatenate([self.w, self.w_val])
        return Dataset(joined(self.x, self.x_val), np.concatenate([self.y, self.y_val]), w=w,
                       window=self.window, held=self.held)


_cache: dict = {}       # data section -> (Dataset, the files it was read from)
_opened: dict = {}      # (kind, path, Reading) -> Source, per process
_seen: dict = {}        # file -> (size, mtime_ns) when this process first saw it
KINDS = ("npz", "npy", "hdf5", "root")
MEMORY_SHARE = 0.25     # of a node's memory, for its ranks' in-memory copies of the data


def load_data(data, base_dir=None, comm=None) -> Dataset:
    """The Dataset described by a DataSpec (loader or file lists, optional val_* files).
    comm: the training communicator, whose ranks on a node hold one in-memory copy
    (collective over comm when the data are not read yet)."""
    key = repr(data), str(base_dir)
    if key in _cache:
        dataset, files = _cache[key]
        check_unchanged(files)
        return dataset
    _cache.clear()  # one study's data at a time
    files: list = []
    node = None if data.loader else NodeShare.of(comm)
    _cache[key] = _read(data, base_dir, files, node), files
    return _cache[key][0]


def check_unchanged(files) -> None:
    """Every file as this process first saw it (size and mtime), or a DataError naming it.
    A node-local copy (data.cache) is checked through its original."""
    for file in files:
        try:
            st = os.stat(file)
        except OSError:
            raise DataError(f"{file}: removed since the study started reading it") from None
        now = st.st_size, st.st_mtime_ns
        first = _seen.setdefault(file, now)
        if now != first:
            raise DataError(f"{file}: changed since the study started reading it (size "
                            f"{first[0]} -> {now[0]} bytes, or its modification time); a "
                            f"study does not mix two versions of its data")


_CHUNK = 1 << 22     # values looked at a time (a bounded temporary, however big the data)


def check_finite(ds: Dataset) -> Dataset:
    """A NaN or an infinity in the data makes every weight NaN at the first batch that
    holds it, and the trial then ends COMPLETE with chance-level accuracy and no error
    anywhere (one NaN pixel in the digits is enough for two folds of three).
    So the data is refused where it is read, with where the first one is."""
    for name, a in _checked(ds):
        if a is None or streamed(a) or not np.issubdtype(np.asarray(a).dtype, np.inexact):
            continue
        flat = np.asarray(a).reshape(len(a), -1)
        step = max(1, _CHUNK // max(1, flat.shape[1]))
        bad = 0
        first = None
        for start in range(0, len(flat), step):
            mask = ~np.isfinite(flat[start:start + step])
            if mask.any():
                bad += int(mask.sum())
                if first is None:
                    first = start + int(np.argwhere(mask)[0][0])
        if bad:
            raise ValueError(f"data: the {name} hold {bad} NaN or infinite value(s), the first "
                             f"in sample {first}; training on them makes the model's weights "
                             f"NaN (clean or impute them in the loader)")
    return ds


def _checked(ds: Dataset):
    """(what, array) of everything check_finite looks at: each input of named Inputs."""
    for name, a in (("features", ds.x), ("labels", ds.y), ("validation features", ds.x_val),
                    ("validation labels", ds.y_val)):
        if isinstance(a, Inputs):
            yield from ((f"{name} '{k}'", part) for k, part in a.parts.items())
        else:
            yield name, a


def _read(data, base_dir, files: list, node=None) -> Dataset:
    if data.loader:
        from mpiopt.refs import load_callable

        loaded = load_callable(data.loader, base_dir, field="objective.data.loader")()
        dataset = check_finite(from_loader(loaded))
        dataset.window = shuffle_window(data, [])
        return dataset
    try:
        train = catalog(data, base_dir, files=files)
        val = catalog(data, base_dir, prefix="val_", files=files)
        stream, error = not in_memory(data.in_memory, sum(s.nbytes for s in train + val)), None
    except Exception as exc:  # raised on every rank of the node, before its first window
        if node is None:
            raise
        error = exc
    if node is not None:
        stream = node.agree(error, stream)    # the reader's choice, the node's
    x, y = _inputs(train, stream, data, node), _labels(train)
    xv, yv = (_inputs(val, stream, data, node), _labels(val)) if val else (None, None)
    groups = file_numbers(train) if data.split_by == "file" else None
    w = scaled(_weights(train), y, data.balance_classes, files_named(train))
    wv = scaled(_weights(val), yv, data.balance_classes, files_named(val)) if val else None
    return check_finite(Dataset(x, y, xv, yv, groups=groups, w=w, w_val=wv,
                                window=shuffle_window(data, train),
                                chunks=split_chunks(data, train), held=node))


def _inputs(sources, stream: bool, data, node=None):
    """The features, or with collections the named Inputs (mpiopt.training.inputs)."""
    if not data.collections:
        return _features(sources, stream, node)
    parts = {FLAT: _features(sources, stream, node)} if data.features else {}
    for c in data.collections:
        parts[c.name] = _features([s.inputs[c.name] for s in sources], stream, node)
    return Inputs(parts, masked=[c.name for c in data.collections if c.mask])


def _weights(sources):
    if any(s.weights is None for s in sources):
        return None
    return np.concatenate([s.weights for s in sources])


def files_named(sources) -> str:
    """A file list as one line names it: its first file, and how many more."""
    more = len(sources) - 1
    return sources[0].file + (f" (and {more} more file{'s' * (more > 1)})" if more else "")


def catalog(data, base_dir=None, prefix: str = "", files: list | None = None) -> list:
    """The Sources of the files of the spec's (training or val_) file list; each file is
    opened once per process (its header and labels: every check that can be made before
    training, made here). `files` gets the files watched for changes."""
    from mpiopt.training.cache import local_copy

    for kind in KINDS:
        patterns = getattr(data, prefix + kind)
        if patterns:
            break
    else:
        return []
    reading = Reading.of(data)
    sources = []
    watched = [] if files is None else files
    for path in expand(patterns, base_dir, directories=kind == "npy"):
        watched.append(str(path / f"{data.features}.npy") if kind == "npy" else str(path))
        check_unchanged(watched[-1:])
        if data.cache:
            path = local_copy(path, data.cache)
        key = kind, str(path), reading
        if key not in _opened:
            _opened[key] = open_source(kind, str(path), reading=reading)
        sources.append(_opened[key])
    FileArray(sources)             # the files' sample shapes agree, or one line says which
    if data.selection and not any(s.n for s in sources):
        raise DataError(f"{files_named(sources)}: objective.data.selection: keeps no event of "
                        f"the {sum(s.events for s in sources)} in the "
                        f"{'validation ' * bool(prefix)}files: {data.selection!r}")
    return sources


def describe(data, base_dir=None) -> list[str]:
    """What the data section reads, in lines for a person: the shuffle `auto` chose when
    it is a window; the events of each file list, before and after the selection, and the
    weights (for files read with any of selection, weights or collections). Empty for a
    loader."""
    from dataclasses import replace

    if data.loader:
        return []
    lines = []
    train = catalog(replace(data, cache=None), base_dir)
    if data.shuffle == "auto" and (window := shuffle_window(data, train)):
        lines.append(f"data: shuffle: window of {window} samples (auto: some files are "
                     f"chunked or compressed, and an exact shuffle reads a whole chunk per "
                     f"sample; data.shuffle: exact forces it)")
    lines += describe_chunks(split_chunks(data, train))
    if not (data.selection or data.weights or data.balance_classes or data.collections):
        return lines
    for prefix, what in (("", "training"), ("val_", "validation")):
        sources = catalog(replace(data, cache=None), base_dir, prefix=prefix)
        if not sources:
            continue
        events, kept = sum(s.events for s in sources), sum(s.n for s in sources)
        line = f"data: {what}: {events} events in {len(sources)} file{'s' * (len(sources) > 1)}"
        if data.selection:
            line += (f"; the selection keeps {kept} ({100 * kept / max(1, events):.1f}%): "
                     f"{data.selection}")
        lines.append(line + _weights_note(data, sources))
    return lines


def _weights_note(data, sources) -> str:
    if not data.weights:
        return "; classes balanced" if data.balance_classes else ""
    w = _weights(sources)
    negative = int((w < 0).sum())
    note = f"; weights '{data.weights}'"
    if negative:
        note += f" ({negative} negative, {100 * negative / max(1, len(w)):.1f}%)"
    return note + (", classes balanced" if data.balance_classes else "")


def _features(sources, stream: bool, node=None):
    if stream:
        for s in sources:
            if s.extra.get("compressed"):
                raise DataError(f"{s.file}: array is compressed (np.savez_compressed); "
                                f"streaming reads samples in place: save with np.savez or as "
                                f".npy, or set data.in_memory: true")
        return FileArray(sources)
    return read_whole(sources, node)


def read_whole(sources, node=None) -> np.ndarray:
    """The features of every file in one array, each file read into its place (module
    docstring): a block at a time where the file is read by block, in one copy where it
    is memory-mapped, whole where it can only be read whole (np.savez_compressed). One
    memory-mapped file is the mapping itself: its pages, shared by the node's ranks.
    node (shared.NodeShare): the array in node-shared memory, read by the node's reader."""
    if len(sources) == 1 and sources[0].mapped is not None:
        return sources[0].read(0, sources[0].n)
    shape = (sum(s.n for s in sources),) + tuple(sources[0].sample_shape)
    dtype = np.result_type(*(s.dtype for s in sources))
    if node is not None:
        return node.array(shape, dtype, lambda out: _fill(out, sources))
    return _fill(np.empty(shape, dtype), sources)


def _fill(out: np.ndarray, sources) -> np.ndarray:
    """out, holding the features of sources one after the other."""
    from mpiopt.training.stream import BLOCK

    at = 0
    for s in sources:
        if s.mapped is not None:
            out[at:at + s.n] = s.mapped
        else:
            edges = s.blocks(BLOCK) if s.bounds is not None else (0, s.n)
            for lo, hi in zip(edges[:-1], edges[1:]):
                out[at + lo:at + hi] = s.read(int(lo), int(hi))
        at += s.n
    return out


def _labels(sources) -> np.ndarray:
    return np.concatenate([s.labels for s in sources])


def in_memory(setting, nbytes: int) -> bool:
    """The rule of data.in_memory (module docstring)."""
    if setting is True or setting is False:
        return setting
    return nbytes <= MEMORY_SHARE * memory_per_rank()


def memory_per_rank() -> float:
    """Bytes one rank may use: node (or cgroup) memory / ranks on the node, capped by the
    process's RLIMIT_AS and RLIMIT_DATA."""
    import resource

    from mpiopt.training.threads import node_layout

    node = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            node = min(node, int(limit))
    except OSError:
        pass
    per = node / max(1, node_layout()[1])
    for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        soft = resource.getrlimit(which)[0]
        if soft != resource.RLIM_INFINITY:
            per = min(per, soft)
    return per


def from_loader(returned) -> Dataset:
    """(x, y) or (x_train, y_train, x_val, y_val) from a user's loader."""
    if not isinstance(returned, (tuple, list)) or len(returned) not in (2, 4):
        raise ValueError("the data loader must return (x, y) or (x_train, y_train, x_val, y_val)")
    arrays = [np.asarray(a) for a in returned]
    check_pair(arrays[0], arrays[1], "loader")
    if len(arrays) == 4:
        check_pair(arrays[2], arrays[3], "loader validation")
    return Dataset(*arrays)


# ----------------------------------------------------------------------- sharding
def shard(n: int, size: int, rank: int) -> slice:
    """This rank's contiguous part of n items; parts differ in length by at most one."""
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (rank < extra))


def batches(n: int, batch_size: int):
    """Slices of the global batches of an epoch; the last one may be smaller."""
    return [slice(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool = True,
                window: int | None = None, batch: int | None = None) -> np.ndarray:
    """The sample order of one epoch, the same on every rank; window: data.shuffle_window
    samples per window (data.shuffle: window), None: an exact permutation; batch: the
    global batch size, whose batches a window shuffle puts in ascending order
    (stream.window_order)."""
    order = np.arange(n, dtype=index_dtype(n))
    if not shuffle:
        return order
    if window:
        return window_order(n, seed, epoch, window, batch)
    np.random.default_rng([int(seed) % 2**32, int(epoch)]).shuffle(order)
    return order
