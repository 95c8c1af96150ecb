"""A model's named inputs: the flat features and each collection, over the same samples.

With `objective.data.collections` the model takes several inputs, a Keras functional
model with one `keras.Input(name=...)` per name, called with a dict:

- `features`: the flat branches (when `objective.data.features` names any), (branches,);
- `NAME`, for each collection: (length, branches), float32;
- `NAME_mask`, for each collection whose `mask` is on: (length,), 1 for an object and 0
  for padding (the collection's reads carry it as their last channel, so one read gives
  both: mpiopt.training.rootfiles).

`Inputs` holds each input's array as the single-input path holds its features (in memory,
or streamed from the files) and looks like one array to the code that indexes samples:
`len(x)`, `x[indices]` and `x[start:stop]` give a batch as that dict, and
`stream.take(x, indices)` a subset (a fold) without reading anything of a streamed one.
"""
from __future__ import annotations

import numpy as np

from mpiopt.training.stream import FileArray, Joined, streamed, take

FLAT = "features"       # the name of the flat features' input


class Inputs:
    """Named arrays of the same samples; `masked`: the names whose last channel is a mask."""

    def __init__(self, parts: dict, masked=()):
        self.parts, self.masked = dict(parts), frozenset(masked)
        lengths = {len(a) for a in self.parts.values()}
        if len(lengths) != 1:
            raise ValueError(f"inputs of different lengths: {sorted(lengths)}")

    def __len__(self) -> int:
        return len(next(iter(self.parts.values())))

    @property
    def streams(self) -> bool:
        """Whether the samples are read from their files (stream.streamed)."""
        return any(streamed(a) for a in self.parts.values())

    def arrays(self):
        """Each input's array as held (the mask still inside its collection's)."""
        return self.parts.values()

    def __getitem__(self, key) -> dict:
        out = {}
        for name, array in self.parts.items():
            rows = array[key]
            if name in self.masked:
                out[name] = np.ascontiguousarray(rows[..., :-1])
                out[f"{name}_mask"] = np.ascontiguousarray(rows[..., -1])
            else:
                out[name] = rows
        return out

    def subset(self, idx) -> "Inputs":
        return Inputs({name: take(a, idx) for name, a in self.parts.items()}, self.masked)

    def joined(self, other: "Inputs") -> "Inputs":
        """These samples, then other's (training.refit: the training and validation sets)."""
        return Inputs({name: joined(a, other.parts[name]) for name, a in self.parts.items()},
                      self.masked)


def joined(a, b):
    """The samples of a, then of b: features in memory (gathered from both, not copied
    into one: stream.Joined), streamed, or named inputs."""
    if isinstance(a, Inputs):
        return a.joined(b)
    if streamed(a):
        return FileArray(a.sources + b.sources)
    return Joined(a, b)

