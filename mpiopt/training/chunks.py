"""Files read by chunk: what the shuffle and the splits do for them.

A file is read by chunk when its features (or a collection of it) cannot be read by
sample in place: chunked or compressed HDF5, compressed ROOT baskets, np.savez_compressed.
Reading one sample of it decompresses its whole chunk (its block: the format's chunks or
clusters, merged up to stream.BLOCK samples), so two rules follow, both chosen from the
files (never from the in-memory/streamed path, so that both paths give the same trial
values):

- `data.shuffle: auto` is the window shuffle (stream.window_order) for such files, else
  exact: an exact shuffle decompresses a whole chunk for each sample it takes.
- `data.split_by: auto` makes the K folds and the holdout of whole chunks for such files
  (kfold.chunk_kfold_splits, chunk_holdout_split), else of samples. Split by sample, a
  fold's training samples and its held-out ones share every chunk, so each epoch
  decompresses the held-out samples beside the trained ones (a third more with K = 3),
  and validating decompresses every chunk for a fraction of them. Split by chunk, a
  chunk is read only by the sets it belongs to. The chunks are dealt to the folds at
  random with the seed the sample splits take, stratified by each chunk's most frequent
  class, so the folds stay random and balanced; since a chunk holds consecutive events,
  a fold's size is then only within one chunk of the others, so chunks split only when
  every fold (or the held-out part) gets at least MIN_CHUNKS of them, else samples do.
  A study stored before `auto` was the default resumes with the folds it had
  (spec._resolved.STORED_DEFAULTS: `sample`). The chunks are the blocks a file is read
  by, so stream.BLOCK is part of the fold rule: another value would deal other folds to
  the studies that split by chunk, which resume with theirs.
"""
from __future__ import annotations

import numpy as np

from mpiopt.training.stream import BLOCK, index_dtype

MIN_CHUNKS = 10     # chunks each fold (or the held-out part) gets at least, to split by chunk


def by_block(source) -> bool:
    """Whether a file's features (or a collection of it) are read by block, not in place."""
    return source.mapped is None or any(map(by_block, source.inputs.values()))


def shuffle_window(data, sources) -> int | None:
    """The rule of data.shuffle (module docstring): samples per window, or None (exact)."""
    if data.shuffle == "window" or (data.shuffle == "auto" and any(map(by_block, sources))):
        return data.shuffle_window
    return None


def split_chunks(data, sources) -> np.ndarray | None:
    """The chunks the splits may be made of (data.split_by: auto over files read by
    chunk): where each starts among the samples of all the files one after the other,
    and their number at the end; None: the splits are over samples (or files)."""
    if data.split_by != "auto" or not any(map(by_block, sources)):
        return None
    parts, at = [], 0
    for s in sources:
        parts.append(at + _edges(s)[:-1])
        at += s.n
    starts = np.unique(np.concatenate(parts + [np.array([at])]))
    return starts.astype(index_dtype(at + 1))


def _edges(source) -> np.ndarray:
    """A file's chunk boundaries: the blocks it is read by (those of its collections too),
    or each sample where it is read in place."""
    parts = [p for p in (source, *source.inputs.values()) if p.mapped is None]
    if not parts:
        return np.arange(source.n + 1)
    return np.unique(np.concatenate([p.blocks(BLOCK) for p in parts]))


def chunks_suffice(starts: np.ndarray | None, kfold: int, holdout: float) -> bool:
    """Whether the splits are made of these chunks (module docstring): every fold, or the
    held-out part and the rest, gets at least MIN_CHUNKS of them."""
    if starts is None:
        return False
    chunks = len(starts) - 1
    smallest = chunks // kfold if kfold > 1 else round(min(holdout, 1 - holdout) * chunks)
    return smallest >= MIN_CHUNKS


def describe_chunks(starts: np.ndarray | None) -> list[str]:
    """The line that says the splits may be of whole chunks, for the study's start: where
    the chunks suffice for some split (two folds), since the data section alone does not
    say how many folds the study takes."""
    if not chunks_suffice(starts, 2, 0.5):
        return []
    sizes = np.diff(starts)
    return [f"data: split_by: whole chunks ({len(sizes)} of {int(np.median(sizes))} samples; "
            f"auto: some files are chunked or compressed, and a split by sample decompresses "
            f"the held-out samples with the trained ones; while every fold gets at least "
            f"{MIN_CHUNKS} chunks, else by sample; data.split_by: sample forces samples)"]
