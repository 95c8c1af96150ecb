"""ROOT files through uproot: a TTree or an RNTuple, whichever the file holds.

The object named by `objective.data.tree` is read as it is stored: a TTree (the format of
most files written so far) or an RNTuple (the format ROOT and the LHC experiments move to,
and what `uproot.recreate(...)[name] = {...}` writes). Both are read through uproot's
same `arrays(names, entry_start, entry_stop)`, so flat features, labels, weights, the
selection's branches and collections mean the same in either; anything else under that
name (a histogram, a directory) is refused in one line saying what it is.

- Flat branches (one value, or a fixed-size array, per entry) give one column per value.
  A TTree's branches whose baskets are all stored uncompressed are memory-mapped
  (mpiopt.training.baskets states the rule); the others are read by entry ranges, whole
  clusters at a time (a TTree's common entry offsets, an RNTuple's cluster summaries).
- A collection (`objective.data.collections`) is a set of jagged branches describing
  the same objects of each event (the particles, tracks or jets): read as awkward arrays,
  optionally sorted inside each event by one branch, then padded with `pad_value` or cut
  to `length` objects, giving float32 samples of shape (length, branches), and a last
  channel of 1 for a real object and 0 for padding when `mask` is on (split off as the
  input `NAME_mask`: mpiopt.training.inputs). Each read pads the entries it was asked
  for, so streamed reads pad per cluster and the in-memory read pads the whole file:
  the same values either way.
"""
from __future__ import annotations

import numpy as np

from mpiopt.errors import DataError
from mpiopt.training.baskets import mapped_branches
from mpiopt.training.sources import Columns, Source, made


def _uproot():
    try:
        import uproot
    except ImportError as e:
        raise DataError("data.root needs uproot: pip install 'mpiopt[uproot]'") from e
    return uproot


def events_of(root_file, file, name: str):
    """The TTree or RNTuple `name` of an open ROOT file, or one line saying why not."""
    uproot = _uproot()
    if name not in root_file:
        raise DataError(f"{file}: no tree or RNTuple '{name}' (has "
                        f"{', '.join(root_file.keys(cycle=False)) or 'nothing'})")
    classes = root_file.classnames(cycle=False)
    obj = root_file[name]
    if not isinstance(obj, (uproot.TTree, uproot.behaviors.RNTuple.RNTuple)):
        kind = classes.get(name.split(";")[0], type(obj).__name__)
        raise DataError(f"{file}: '{name}' is a {kind}, neither a TTree nor an RNTuple")
    return obj


def _open(file, name: str):
    return events_of(_uproot().open(file, array_cache=None), file, name)


def _rntuple(events) -> bool:
    return not isinstance(events, _uproot().TTree)


def _holder(events, name: str) -> tuple[str, str]:
    """(what holds the values, what one is called): ("tree 'Events'", "branch")."""
    return (f"RNTuple '{name}'", "field") if _rntuple(events) else (f"tree '{name}'", "branch")


def open_root(file: str, reading) -> Source:
    """The Source of one ROOT file: flat features (if any), labels, and a Source per
    collection in `inputs`."""
    events = _open(file, reading.tree)
    holder, word = _holder(events, reading.tree)
    names = list(events.keys())
    branches = list(reading.features or ())
    for name in branches + [reading.labels]:
        if name not in names:
            raise DataError(f"{file}: {holder} has no {word} '{name}' (has {', '.join(names)})")
    y = events.arrays([reading.labels], library="np")[reading.labels]
    src = _flat(file, events, branches, y, reading.tree)
    src.columns = Columns(holder, word, names,
                          lambda name: events.arrays([name], library="np")[name])
    src.inputs = {c.name: _collection(file, events, c, y, reading.tree, holder, word, names)
                  for c in reading.collections}
    return src


def _flat(file, events, branches: list, y, tree: str) -> Source:
    """The flat branches side by side, memory-mapped where baskets.mapped_branches can."""
    n = int(events.num_entries)
    if not branches:        # collections only: the Source holds the labels and the count
        return Source(file, n, (0,), np.dtype(np.float32), y)
    head = events.arrays(branches, entry_stop=min(2, n), library="np")
    for name in branches:
        if head[name].dtype == object:
            raise DataError(f"{file}: branch '{name}' is jagged (a variable number of values "
                            f"per entry); only flat branches are features: pad it as a "
                            f"collection (objective.data.collections) or flatten it")
    mapped = None if _rntuple(events) else mapped_branches(file, events, branches)
    if mapped is not None:
        return made(file, mapped, y)
    first = _columns(events, branches, 0, min(1, n))
    return Source(file, n, tuple(first.shape[1:]), first.dtype, y,
                  reader=_reader(file, tree, lambda ev, a, b: _columns(ev, branches, a, b)),
                  bounds=cluster_starts(events))


def _reader(file, tree: str, read):
    """read(events, start, stop) on this process's own open copy of the file (opened at
    the first read, then reused)."""
    handle: dict = {}

    def reader(start, stop):
        if "events" not in handle:
            handle["events"] = _open(file, tree)
        return read(handle["events"], start, stop)

    return reader


def cluster_starts(events) -> np.ndarray | None:
    """The first entry of each cluster (the entry ranges read together), and n at the end."""
    if _rntuple(events):
        starts = [int(c.num_first_entry) for c in events.cluster_summaries]
        return np.asarray(starts + [int(events.num_entries)], dtype=np.int64)
    try:
        return np.asarray(events.common_entry_offsets(), dtype=np.int64)
    except AttributeError:
        return None


def _columns(events, branches, start, stop) -> np.ndarray:
    """The branches of entries [start, stop) side by side, one row per entry."""
    arrays = events.arrays(branches, entry_start=start, entry_stop=stop, library="np")
    cols = [np.asarray(arrays[b]).reshape(stop - start, -1) for b in branches]
    return np.concatenate(cols, axis=1) if len(cols) > 1 else cols[0]


# ----------------------------------------------------------------------- collections
def _collection(file, events, coll, y, tree, holder, word, names) -> Source:
    """The Source of one collection: (length, branches [+ mask]) float32 per event."""
    where = f"objective.data.collections.{coll.name}"
    read = _wanted(coll)
    for name in read:
        if name not in names:
            raise DataError(f"{file}: {where}: {holder} has no {word} '{name}' "
                            f"(has {', '.join(names)})")
    head = events.arrays(read, entry_stop=min(1, int(events.num_entries)))
    for name in read:
        problem = _not_a_list_of_numbers(head[name])
        if problem:
            raise DataError(f"{file}: {where}: {word} '{name}' {problem}")
    shape = (coll.length, len(coll.branches) + bool(coll.mask))
    return Source(file, int(events.num_entries), shape, np.dtype(np.float32), y,
                  reader=_reader(file, tree, lambda ev, a, b: padded(file, ev, coll, a, b)),
                  bounds=cluster_starts(events))


def _wanted(coll) -> list:
    """The branches a collection reads: its own, and the one it is sorted by."""
    extra = [coll.sort_by] if coll.sort_by and coll.sort_by not in coll.branches else []
    return list(coll.branches) + extra


def _not_a_list_of_numbers(array) -> str | None:
    """None for a jagged array of numbers (a list per event), else what it is instead."""
    import awkward as ak

    kind = ak.type(array).content
    if not isinstance(kind, ak.types.ListType):
        return ("is not jagged (it holds the same number of values in every event): a "
                "collection is a list of objects per event; a flat branch goes in "
                "objective.data.features")
    inner = kind.content
    if not isinstance(inner, ak.types.NumpyType) or inner.primitive.startswith(
            ("datetime", "timedelta", "complex")):
        return f"holds {inner} per object, not numbers"
    return None


def padded(file, events, coll, start: int, stop: int) -> np.ndarray:
    """Entries [start, stop) of a collection, sorted, padded or cut to coll.length.

    The jagged arrays' flat contents are moved into place by one index computed for all
    the branches (where each kept object lands: its event's row, its rank in the event),
    so padding costs a few numpy passes over the values, not an awkward pass a branch."""
    import awkward as ak

    arrays = events.arrays(_wanted(coll), entry_start=start, entry_stop=stop)
    counts = _same_counts(file, arrays, coll, start)
    first = np.cumsum(counts) - counts                 # each event's first object
    event = np.repeat(np.arange(len(counts)), counts)
    if coll.sort_by:
        ranked = ak.argsort(arrays[coll.sort_by], axis=1,
                            ascending=coll.order == "ascending", stable=True)
        source = first[event] + ak.to_numpy(ak.flatten(ranked))
    else:
        source = np.arange(len(event))
    rank = np.arange(len(event)) - first[event]
    kept = rank < coll.length
    where = event[kept] * coll.length + rank[kept]
    source = source[kept]
    width = len(coll.branches) + bool(coll.mask)
    out = np.full((len(counts) * coll.length, width), coll.pad_value, np.float32)
    for j, name in enumerate(coll.branches):
        out[where, j] = ak.to_numpy(ak.flatten(arrays[name]))[source]
    if coll.mask:
        out[:, -1] = 0.0
        out[where, -1] = 1.0
    return out.reshape(len(counts), coll.length, width)


def _same_counts(file, arrays, coll, start: int) -> np.ndarray:
    """The objects per entry, the same in every branch of the collection, or one line
    naming the first entry where two branches disagree."""
    import awkward as ak

    names = _wanted(coll)
    counts = ak.to_numpy(ak.num(arrays[names[0]], axis=1))
    for name in names[1:]:
        other = ak.to_numpy(ak.num(arrays[name], axis=1))
        if not np.array_equal(counts, other):
            i = int(np.argmax(counts != other))
            raise DataError(f"{file}: objective.data.collections.{coll.name}: branches "
                            f"'{names[0]}' and '{name}' hold {counts[i]} and {other[i]} "
                            f"values in entry {start + i}; the branches of a collection "
                            f"describe the same objects")
    return counts
