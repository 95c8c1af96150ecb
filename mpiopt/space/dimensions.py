"""Search-space dimensions and the conversions every searcher needs.

One parameter set is always a plain ``dict`` of native Python values (``float``, ``int``,
``str``, ``bool``), because it travels through MPI, JSON and SQLite. This module turns such
dicts into scikit-optimize points and into bounded ``[0, 1]`` genomes for DEAP, and back,
so the searchers never deal with priors, rounding or numpy scalars themselves.

Genome encoding, one gene per dimension in declaration order:

- real: linear position between low and high (in log space for a log-uniform prior);
- integer: the integer is widened to the interval ``[low - 0.5, high + 0.5]`` (log space for
  a log prior) so every integer owns an equally wide bin; decoding rounds to the nearest
  integer and clips to ``[low, high]``;
- categorical: ``n`` equal bins, one per choice; a choice encodes to its bin's centre.

Uniform random genes therefore decode to samples that respect the priors, which is how
:meth:`Space.sample` works.

Conditional spaces (mpiopt.space.conditions: `when`, `for`): a parameter set holds only the
parameters that are *active*; an absent one is missing from the dict (never None).
Searchers keep working on the full genome or encoding, where an absent parameter's slot
holds the constant NEUTRAL (mid-range), and `from_genome`, `sample` and `active` drop
what is inactive before a suggestion leaves them. Two points where a parameter is absent
therefore do not differ in it; an absent and a present one differ as if the absent one
sat mid-range.

>>> import numpy as np
>>> space = Space([Real("lr", 1e-4, 1e-1, "log-uniform"), Integer("units", 8, 512),
...                Categorical("act", ["relu", "tanh"])])
>>> p = space.sample(np.random.default_rng(0))
>>> space.from_genome(space.to_genome(p)) == p
True
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence, Union

import numpy as np

from mpiopt.space.conditions import dependency_order, parse_when
from mpiopt.errors import SpaceError, shown  # noqa: F401  (raised here; importable from here too)

PRIORS = ("uniform", "log-uniform")
NEUTRAL = 0.5   # the gene (and encoded column) of an absent parameter: see the docstring
CHOICE_TYPES = (str, int, float, bool)


def _is_number(value: Any) -> bool:
    """bool is an int in Python but never a number in a search space."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iu"


def _is_real(value: Any) -> bool:
    """A Python or numpy int/float, never a bool."""
    if _is_number(value) or _is_integer(value):
        return True
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind == "f"


def _native(value: Any) -> Any:
    """numpy scalars become the Python scalar they hold (JSON and SQLite need these)."""
    return value.item() if hasattr(value, "item") and hasattr(value, "dtype") else value


def _clip01(g: float) -> float:
    g = float(g)
    if math.isnan(g):
        return 0.5
    return min(1.0, max(0.0, g))


def _check_bounds(name: str, low: Any, high: Any, prior: str, integer: bool) -> None:
    ok = _is_integer if integer else _is_number
    what = "an integer" if integer else "a number"
    for key, value in (("low", low), ("high", high)):
        if not ok(value):
            raise SpaceError(f"{name}.{key}", f"expected {what}, got {shown(value)}")
        if not math.isfinite(value):
            raise SpaceError(f"{name}.{key}", f"expected a finite number, got {shown(value)}")
    if prior not in PRIORS:
        raise SpaceError(f"{name}.prior", f"expected one of {', '.join(PRIORS)}, got {shown(prior)}")
    if low >= high:
        raise SpaceError(f"{name}.low", f"low ({low}) must be less than high ({high})")
    if prior == "log-uniform" and low <= 0:
        raise SpaceError(f"{name}.low", f"a log-uniform prior needs low > 0, got {low}")


@dataclass(frozen=True)
class Real:
    """A float between low and high (both included)."""

    name: str
    low: float
    high: float
    prior: str = "uniform"

    def __post_init__(self):
        _check_bounds(self.name, self.low, self.high, self.prior, integer=False)
        object.__setattr__(self, "low", float(self.low))
        object.__setattr__(self, "high", float(self.high))

    @property
    def is_log(self) -> bool:
        return self.prior == "log-uniform"

    def _scale(self, x: float) -> float:
        return math.log(x) if self.is_log else x

    def _unscale(self, u: float) -> float:
        return math.exp(u) if self.is_log else u

    def encode(self, value: Any) -> float:
        lo, hi = self._scale(self.low), self._scale(self.high)
        return _clip01((self._scale(value) - lo) / (hi - lo))

    def decode(self, gene: float) -> float:
        lo, hi = self._scale(self.low), self._scale(self.high)
        value = self._unscale(lo + _clip01(gene) * (hi - lo))
        return min(self.high, max(self.low, value))

    def validate(self, value: Any) -> None:
        if not _is_real(value):
            raise SpaceError(self.name, f"expected a number, got {shown(value)}")
        if not self.low <= value <= self.high:
            raise SpaceError(self.name, f"{shown(value)} is outside [{self.low}, {self.high}]")

    def native(self, value: Any) -> float:
        return float(value)

    def scaled_distance(self, a: Any, b: Any) -> float:
        lo, hi = self._scale(self.low), self._scale(self.high)
        return min(1.0, abs(self._scale(a) - self._scale(b)) / (hi - lo))

    def to_dict(self) -> dict:
        return {"type": "real", "low": self.low, "high": self.high, "prior": self.prior}



@dataclass(frozen=True)
class Integer:
    """An integer between low and high (both included)."""

    name: str
    low: int
    high: int
    prior: str = "uniform"

    def __post_init__(self):
        _check_bounds(self.name, self.low, self.high, self.prior, integer=True)
        object.__setattr__(self, "low", int(self.low))
        object.__setattr__(self, "high", int(self.high))

    @property
    def is_log(self) -> bool:
        return self.prior == "log-uniform"

    def _scale(self, x: float) -> float:
        return math.log(x) if self.is_log else x

    def _edges(self) -> tuple[float, float]:
        """The widened interval: each integer owns a bin of equal width (in prior scale)."""
        return self._scale(self.low - 0.5), self._scale(self.high + 0.5)

    def encode(self, value: Any) -> float:
        lo, hi = self._edges()
        return _clip01((self._scale(value) - lo) / (hi - lo))

    def decode(self, gene: float) -> int:
        lo, hi = self._edges()
        u = lo + _clip01(gene) * (hi - lo)
        x = math.exp(u) if self.is_log else u
        return min(self.high, max(self.low, math.floor(x + 0.5)))

    def validate(self, value: Any) -> None:
        if not _is_integer(value):
            raise SpaceError(self.name, f"expected an integer, got {shown(value)}")
        if not self.low <= value <= self.high:
            raise SpaceError(self.name, f"{shown(value)} is outside [{self.low}, {self.high}]")

    def native(self, value: Any) -> int:
        return int(value)

    def scaled_distance(self, a: Any, b: Any) -> float:
        lo, hi = self._scale(self.low), self._scale(self.high)
        return min(1.0, abs(self._scale(a) - self._scale(b)) / (hi - lo))

    def to_dict(self) -> dict:
        return {"type": "integer", "low": self.low, "high": self.high, "prior": self.prior}



@dataclass(frozen=True)
class Categorical:
    """One of a list of choices (str, int, float or bool), in the given order.

    Choices that compare equal in Python (``1``, ``1.0`` and ``True``) are refused as
    duplicates: scikit-optimize and dict lookups cannot tell them apart. Checking and
    looking up go through a dict of the choices, so a space of 100,000 choices is read
    in linear time (each choice compared with those before it took 34 s for 40,000).
    """

    name: str
    choices: tuple

    def __post_init__(self):
        choices = self.choices
        if not isinstance(choices, (list, tuple)):
            raise SpaceError(f"{self.name}.choices", f"expected a list, got {shown(choices)}")
        if not choices:
            raise SpaceError(f"{self.name}.choices", "expected at least one choice, got none")
        positions: dict = {}
        for i, choice in enumerate(choices):
            if not isinstance(choice, CHOICE_TYPES):
                raise SpaceError(f"{self.name}.choices[{i}]",
                                 f"expected a string, number or boolean, got {shown(choice)}")
            if isinstance(choice, float) and not math.isfinite(choice):
                raise SpaceError(f"{self.name}.choices[{i}]", f"expected a finite number, got {shown(choice)}")
            j = positions.setdefault(choice, i)
            if j != i:
                raise SpaceError(f"{self.name}.choices[{i}]",
                                 f"duplicate choice {shown(choice)} (same as choice {j}, {shown(choices[j])})")
        object.__setattr__(self, "choices", tuple(choices))
        object.__setattr__(self, "_positions", positions)

    def index(self, value: Any) -> int:
        """Position of value among the choices. The choices hold no two equal values, so
        at most one can match; it does when its type is the value's, or when neither or
        both are booleans (1 finds 1.0, True never finds 1)."""
        value = _native(value)
        try:
            i = self._positions.get(value)
        except TypeError:                 # unhashable: a list, a dict
            i = None
        if i is not None:
            choice = self.choices[i]
            if type(choice) is type(value) or isinstance(choice, bool) == isinstance(value, bool):
                return i
        raise SpaceError(self.name, f"{shown(value)} is not one of {shown(list(self.choices))}")

    def encode(self, value: Any) -> float:
        return (self.index(value) + 0.5) / len(self.choices)

    def decode(self, gene: float) -> Any:
        n = len(self.choices)
        return self.choices[min(n - 1, int(_clip01(gene) * n))]

    def validate(self, value: Any) -> None:
        self.index(value)

    def native(self, value: Any) -> Any:
        return self.choices[self.index(value)]

    def scaled_distance(self, a: Any, b: Any) -> float:
        return 0.0 if self.index(a) == self.index(b) else 1.0

    def to_dict(self) -> dict:
        return {"type": "categorical", "choices": list(self.choices)}



Dimension = Union[Real, Integer, Categorical]


def dimension_from_dict(name: str, entry: dict) -> Dimension:
    """Build one dimension from its description (the YAML/`to_dict` shape)."""
    if not isinstance(entry, dict):
        raise SpaceError(name, f"expected a mapping with a 'type', got {shown(entry)}")
    kind = entry.get("type")
    if kind == "categorical":
        return Categorical(name, entry.get("choices"))
    cls = {"real": Real, "integer": Integer}.get(kind)
    if cls is None:
        raise SpaceError(f"{name}.type", f"expected real, integer or categorical, got {shown(kind)}")
    return cls(name, entry.get("low"), entry.get("high"), entry.get("prior", "uniform"))


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
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
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
