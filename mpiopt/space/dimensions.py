"""Search-space dimensions and the conversions every searcher needs (the space they
make is mpiopt.space.search_space).

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

import math
from dataclasses import dataclass
from typing import Any, Union


from mpiopt.errors import SpaceError, shown  # noqa: F401  (raised here; importable from here too)
from mpiopt.space.limits import check_bound, check_choice, check_log_product, check_scale

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
        check_bound(f"{name}.{key}", value, integer)
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
        if self.is_log:
            check_log_product(self.name, self.low, self.high)
        check_scale(self.name, self.low, self.high, self._scale(self.low), self._scale(self.high),
                    self.is_log)

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
        check_scale(self.name, self.low, self.high, *self._edges(), self.is_log)

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
            check_choice(f"{self.name}.choices[{i}]", choice)
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
