"""The search space: an ordered collection of named dimensions (mpiopt.space.dimensions)
with their conditions, and the conversions every searcher needs (parameter sets, genomes,
encoded rows, point sets)."""
from __future__ import annotations

import hashlib
from typing import Any, Iterable, Sequence

import numpy as np

from mpiopt import jsontext
from mpiopt.errors import SpaceError, shown
from mpiopt.space.conditions import dependency_order, parse_when
from mpiopt.space.dimensions import NEUTRAL, Categorical, Dimension, dimension_from_dict


class Space:
    """An ordered collection of named dimensions; the order is the genome's (and the
    encoder's, mpiopt.search._skopt). `conditions` maps a parameter name to the
    conditions (mpiopt.space.conditions.Condition) under which it is present."""

    def __init__(self, dimensions: Iterable[Dimension], conditions: dict | None = None):
        self.dimensions: list[Dimension] = list(dimensions)
        self.names: list[str] = [d.name for d in self.dimensions]
        if not self.dimensions:
            raise SpaceError("search_space", "expected at least one parameter")
        seen = set()
        for name in self.names:
            if name in seen:
                raise SpaceError(name, "duplicate parameter name")
            seen.add(name)
        self._by_name = {d.name: d for d in self.dimensions}
        self.conditions: dict[str, tuple] = {n: tuple(c) for n, c in (conditions or {}).items() if c}
        for name, conds in self.conditions.items():
            if name not in self._by_name:
                raise SpaceError(name, "a condition for an unknown parameter")
            for cond in conds:
                if cond.parent not in self._by_name:
                    raise SpaceError(f"{name}.when.{cond.parent}", f"unknown parameter {shown(cond.parent)}")
        self.order: list[str] = dependency_order(self.names, self.conditions)

    @property
    def conditional(self) -> bool:
        """Some parameter is present only under a condition."""
        return bool(self.conditions)

    def is_on(self, name: str, params: dict) -> bool:
        """Whether `name` is active given the (active) values in params: every condition
        holds, and every parent is present."""
        return all(c.parent in params and c.holds(params[c.parent])
                   for c in self.conditions.get(name, ()))

    def active(self, params: dict) -> dict:
        """params without the parameters that are inactive (in the space's order); params
        itself for a space without conditions."""
        if not self.conditions:
            return params
        out: dict = {}
        for name in self.order:
            if name in params and self.is_on(name, out):
                out[name] = params[name]
        return {n: out[n] for n in self.names if n in out}

    def __len__(self) -> int:
        return len(self.dimensions)

    def __iter__(self):
        return iter(self.dimensions)

    def __getitem__(self, name: str) -> Dimension:
        return self._by_name[name]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Space) and self.dimensions == other.dimensions
                and self.conditions == other.conditions)

    def __repr__(self) -> str:
        return f"Space({self.dimensions!r})"

    # -- DEAP genome ----------------------------------------------------------------
    def to_genome(self, params: dict) -> list[float]:
        """One gene per dimension; an absent (inactive) parameter's gene is NEUTRAL."""
        self.check(params)
        return [d.encode(params[d.name]) if d.name in params else NEUTRAL for d in self.dimensions]

    def from_genome(self, genome: Sequence[float]) -> dict:
        """The parameter set a genome stands for: only the active parameters."""
        if len(genome) != len(self.dimensions):
            raise ValueError(f"expected a genome of {len(self)} genes, got {len(genome)}")
        return self.active({d.name: d.decode(g) for d, g in zip(self.dimensions, genome)})

    def sample(self, rng) -> dict:
        """A random parameter set: uniform genes decode to samples that follow the priors."""
        return self.from_genome([float(g) for g in rng.random(len(self.dimensions))])

    # -- membership -----------------------------------------------------------------
    def check(self, params: dict) -> None:
        """Raise SpaceError (a ValueError) naming the first wrong, missing or extra parameter."""
        if not isinstance(params, dict):
            raise SpaceError("params", f"expected a mapping, got {shown(params)}")
        if self.conditions:
            return self._check_conditional(params)
        for d in self.dimensions:
            if d.name not in params:
                raise SpaceError(d.name, "missing")
            d.validate(params[d.name])
        extra = [k for k in params if k not in self._by_name]
        if extra:
            raise SpaceError(str(extra[0]), "not a parameter of this search space")

    def _check_conditional(self, params: dict) -> None:
        """Active parameters present and valid, inactive ones absent, nothing else."""
        extra = [k for k in params if k not in self._by_name]
        if extra:
            raise SpaceError(str(extra[0]), "not a parameter of this search space")
        for name in self.order:
            on = self.is_on(name, params)
            if on and name not in params:
                raise SpaceError(name, "missing")
            if not on and name in params:
                raise SpaceError(name, f"absent unless {self.condition_text(name)}; leave it out")
            if on:
                self._by_name[name].validate(params[name])

    def condition_text(self, name: str) -> str:
        return " and ".join(c.text() for c in self.conditions.get(name, ())) or "always"

    def parameter_set(self, given: dict) -> dict:
        """A complete parameter set from user input (`mpiopt enqueue --set`,
        search.initial_trials): every parameter present and inside the space, in the
        space's order and native types; else SpaceError naming the first wrong one. No
        parameter is filled in: a queued set runs exactly as written."""
        if not isinstance(given, dict):
            raise SpaceError("params", f"expected a mapping of parameters, got {shown(given)}")
        for name in given:
            if name not in self._by_name:
                raise SpaceError(str(name), "not a parameter of this search space (it has: "
                                 f"{', '.join(self.names)})")
        self.check(given)
        return {d.name: d.native(given[d.name]) for d in self.dimensions if d.name in given}

    def contains(self, params: dict) -> bool:
        try:
            self.check(params)
        except ValueError:
            return False
        return True

    def distance(self, a: dict, b: dict) -> float:
        """Largest per-dimension distance, each scaled to [0, 1] (in log space for log
        priors; categorical: 0 if equal else 1). Used to keep pending points apart. An
        absent parameter counts as mid-range (categorical: as a choice of its own)."""
        ra, rb = self.distance_row(a), self.distance_row(b)
        return max(float(x != y) if isinstance(d, Categorical)
                   else min(1.0, abs(x - y) / (d._scale(d.high) - d._scale(d.low)))
                   for d, x, y in zip(self.dimensions, ra, rb))

    def distance_row(self, params: dict) -> list[float]:
        """Coordinates from which PointSet computes `distance` for many points at once:
        the (log-)value for numbers, the choice's index for categories; an inactive
        parameter: mid-range, or index -1."""
        params = self.active(params)
        return [_row_value(d, params[d.name]) if d.name in params else _absent_row_value(d)
                for d in self.dimensions]

    # -- description ----------------------------------------------------------------
    def to_dict(self) -> dict:
        """The description; a conditional parameter's entry gains `when` (so a space
        without conditions describes, and fingerprints, as it always did)."""
        out = {d.name: d.to_dict() for d in self.dimensions}
        for name, conds in self.conditions.items():
            out[name]["when"] = {c.parent: c.to_yaml() for c in conds}
        return out

    @classmethod
    def from_dict(cls, description: dict) -> "Space":
        if not isinstance(description, dict):
            raise SpaceError("search_space", f"expected a mapping, got {shown(description)}")
        dims = [dimension_from_dict(name, entry) for name, entry in description.items()]
        by_name = {d.name: d for d in dims}
        conditions = {name: parse_when(name, entry["when"], by_name)
                      for name, entry in description.items()
                      if isinstance(entry, dict) and entry.get("when") is not None}
        return cls(dims, conditions)

    def fingerprint(self) -> str:
        """sha256 of the description, independent of declaration order: reordering the
        parameters changes neither the meaning of stored trials nor a replay."""
        text = jsontext.exact(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def diff(self, other: "Space") -> list[str]:
        """Human-readable differences from self (stored) to other (new); empty if equal."""
        mine, theirs = self.to_dict(), other.to_dict()
        lines = [f"removed {n}: {_describe(mine[n])}" for n in mine if n not in theirs]
        lines += [f"added {n}: {_describe(theirs[n])}" for n in theirs if n not in mine]
        lines += [f"changed {n}: {_describe(mine[n])} -> {_describe(theirs[n])}"
                  for n in mine if n in theirs and mine[n] != theirs[n]]
        return lines


def _describe(entry: dict) -> str:
    when = "".join(f" when {k}: {v!r}" for k, v in entry.get("when", {}).items())
    if entry["type"] == "categorical":
        return f"categorical {entry['choices']!r}{when}"
    return f"{entry['type']} [{entry['low']}, {entry['high']}] {entry['prior']}{when}"


def _row_value(d: Dimension, value: Any) -> float:
    return float(d.index(value)) if isinstance(d, Categorical) else d._scale(value)


def _absent_row_value(d: Dimension) -> float:
    if isinstance(d, Categorical):
        return -1.0
    return (d._scale(d.low) + d._scale(d.high)) / 2.0


class PointSet:
    """Points (a searcher's pending suggestions) and the distance of a new point to the
    nearest of them, in numpy: with thousands of groups a Python loop over `distance`
    cost milliseconds per suggestion (benchmarks/simulate.py). Same value as
    Space.distance."""

    def __init__(self, space: "Space"):
        self.space = space
        cols = space.dimensions
        self.span = np.array([[1.0 if isinstance(d, Categorical) else d._scale(d.high) - d._scale(d.low)]
                              for d in cols])
        # Stored by column (a reduction across a few columns of a long array is ~7x
        # faster than across rows of two). A free slot holds +inf, at distance 1 (the most
        # there is) from anything: no mask per call. Categories are indices, so
        # min(1, |a - b|) is their 0/1 distance too.
        self.cols = np.full((len(cols), 16), np.inf)
        self.free = list(range(15, -1, -1))
        self.slot: dict = {}

    def add(self, key, params: dict) -> None:
        if key in self.slot:
            return
        if not self.free:
            n = self.cols.shape[1]
            self.cols = np.hstack([self.cols, np.full_like(self.cols, np.inf)])
            self.free = list(range(2 * n - 1, n - 1, -1))
        i = self.free.pop()
        self.cols[:, i], self.slot[key] = self.space.distance_row(params), i

    def discard(self, key) -> None:
        i = self.slot.pop(key, None)
        if i is not None:
            self.cols[:, i] = np.inf
            self.free.append(i)

    def nearest(self, params: dict) -> float:
        """Distance from params to the nearest point (inf when there are none)."""
        if not self.slot:
            return float("inf")
        diff = np.abs(self.cols - np.asarray(self.space.distance_row(params))[:, None])
        diff /= self.span
        return min(1.0, float(diff.max(axis=0).min()))
