"""Conditional parameters: a parameter that exists only for some values of others.

Why: an optimizer's beta1 means nothing under SGD, and a network of depth 2 has no third
layer width. Searching such a parameter when it is absent wastes trials on a dimension
that changes nothing, and storing it as if it mattered misleads every query.

Two pieces of syntax, both expanded here into one idea, a tuple of :class:`Condition` per
parameter (all must hold, and every parent must be present itself):

- ``when: {optimizer: adam}``, ``when: {optimizer: [adam, nadam]}`` (one of the values),
  ``when: {depth: ">= 3"}`` (a comparison, on an integer or real parent: ``>``, ``>=``,
  ``<``, ``<=``, ``==``, ``!=`` and a number);
- ``units_{i}: {..., for: {i: depth}}``: one parameter per index 0 .. depth.high - 1,
  ``units_k`` with the implicit condition ``depth > k`` (mpiopt.spec expands it).

>>> from mpiopt.space import Space
>>> space = Space.from_dict({"opt": {"type": "categorical", "choices": ["adam", "sgd"]},
...     "beta1": {"type": "real", "low": 0.8, "high": 0.99, "when": {"opt": "adam"}}})
>>> space.active({"opt": "sgd", "beta1": 0.9})
{'opt': 'sgd'}
>>> space.conditions["beta1"][0].text()
'opt is adam'
"""
from __future__ import annotations

import difflib
import operator
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpiopt.errors import SpaceError, shown

_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
        "==": operator.eq, "!=": operator.ne}
_COMPARISON = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)\s*$")
MAX_FOR = 64   # parameters one `for` may expand into


@dataclass(frozen=True)
class Condition:
    """`parent` takes one of `values`, or (`op`, `number`) holds for it."""

    parent: str
    values: tuple | None = None
    op: str | None = None
    number: float | None = None

    def holds(self, value: Any) -> bool:
        if self.values is not None:
            return any(v == value and isinstance(v, bool) == isinstance(value, bool)
                       for v in self.values)      # (True is never 1, as in Categorical)
        return _OPS[self.op](value, self.number)

    def mask(self, column, dim) -> "np.ndarray":
        """`holds` over many points at once: `column` holds the parent's values (a
        categorical parent: choice indices) as a numpy array."""
        if self.values is None:
            return _OPS[self.op](column, self.number)
        wanted = [dim.index(v) for v in self.values] if hasattr(dim, "choices") else list(self.values)
        return np.isin(column, wanted)

    def to_yaml(self) -> Any:
        """The canonical form in a resolved spec: a list of values, or the comparison text."""
        if self.values is not None:
            return list(self.values)
        return f"{self.op} {_fmt(self.number)}"

    def text(self) -> str:
        if self.values is not None:
            shown = ", ".join(map(str, self.values))
            return f"{self.parent} is {shown}" if len(self.values) == 1 else f"{self.parent} in [{shown}]"
        return f"{self.parent} {self.op} {_fmt(self.number)}"


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else repr(float(number))


def parse_when(name: str, when: Any, dims: dict) -> tuple:
    """`when` of parameter `name` -> Conditions; SpaceError naming `name.when.PARENT`."""
    if not isinstance(when, dict) or not when:
        raise SpaceError(f"{name}.when", "expected a mapping of parameter -> value(s) or "
                         f"comparison (e.g. {{optimizer: adam}}), got {shown(when)}")
    return tuple(parse_condition(name, parent, test, dims) for parent, test in when.items())


def parse_condition(name: str, parent: Any, test: Any, dims: dict) -> Condition:
    where = f"{name}.when.{parent}"
    if parent not in dims:
        hint = difflib.get_close_matches(str(parent), [str(n) for n in dims], n=1)
        tip = f"; did you mean '{hint[0]}'?" if hint else ""
        raise SpaceError(where, f"unknown parameter {shown(parent)}{tip}")
    dim = dims[parent]
    kind = type(dim).__name__
    if kind != "Categorical" and isinstance(test, str):
        return _comparison(where, parent, test, dim)
    if kind == "Real":
        raise SpaceError(where, f"a real parameter is tested with a comparison such as "
                         f"\"> 0.5\", got {shown(test)}")
    values = test if isinstance(test, list) else [test]
    if not values:
        raise SpaceError(where, "expected a value or a non-empty list of values, got []")
    for value in values:
        try:
            dim.validate(value)
        except SpaceError:
            raise SpaceError(where, f"{shown(value)} is a value {parent} cannot take "
                             f"({_range(dim)})") from None
    return Condition(str(parent), values=tuple(dim.native(v) for v in values))


def _comparison(where: str, parent: str, test: str, dim) -> Condition:
    match = _COMPARISON.match(test)
    if not match:
        raise SpaceError(where, f"expected a value, a list of values or a comparison such as "
                         f"\">= 3\", got {shown(test)}")
    op, number = match.group(1), float(match.group(2))
    cond = Condition(parent, op=op, number=number)
    if not _possible(cond, dim):
        raise SpaceError(where, f"\"{test}\" never holds: {parent} is in [{dim.low}, {dim.high}]")
    return cond


def _possible(cond: Condition, dim) -> bool:
    """Whether some value of dim satisfies cond (bounds arithmetic, no enumeration)."""
    low, high, n, integer = dim.low, dim.high, cond.number, type(dim).__name__ == "Integer"
    if cond.op in (">", ">="):
        return cond.holds(high)
    if cond.op in ("<", "<="):
        return cond.holds(low)
    if cond.op == "==":
        return low <= n <= high and (not integer or float(n).is_integer())
    return True   # "!=": low < high, so some other value exists


def _range(dim) -> str:
    if type(dim).__name__ == "Categorical":
        return f"one of {shown(list(dim.choices))}"
    return f"an integer in [{dim.low}, {dim.high}]"


def dependency_order(names: list[str], conditions: dict) -> list[str]:
    """Names with every parent before its children (else declaration order); a cycle is a
    SpaceError naming the first parameter on it: `a.when.b: a cycle of conditions: a -> b -> a`."""
    order, state = [], {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "open":
            cycle = path[path.index(name):] + [name]
            raise SpaceError(f"{cycle[0]}.when.{cycle[1]}",
                             f"a cycle of conditions: {' -> '.join(cycle)}")
        state[name] = "open"
        for cond in conditions.get(name, ()):
            visit(cond.parent, path + [name])
        state[name] = "done"
        order.append(name)

    for name in names:
        visit(name, [])
    return order


def expand_for(name: str, spec_for: Any, dims: dict) -> tuple[str, str, list[tuple[str, Condition]]]:
    """`NAME_{i}: {..., for: {i: PARENT}}` -> (var, parent, [(NAME_k, PARENT > k), ...]) for
    k in 0 .. PARENT.high - 1. SpaceError naming `name.for...` when it cannot be expanded."""
    if not isinstance(spec_for, dict) or len(spec_for) != 1:
        raise SpaceError(f"{name}.for", f"expected one index and the integer parameter that "
                         f"counts it (e.g. {{i: depth}}), got {shown(spec_for)}")
    (var, parent), = spec_for.items()
    where = f"{name}.for.{var}"
    if not isinstance(var, str) or "{" + var + "}" not in name:
        raise SpaceError(where, f"the name must contain {{{var}}} (e.g. units_{{{var}}})")
    if parent not in dims:
        hint = difflib.get_close_matches(str(parent), [str(n) for n in dims], n=1)
        tip = f"; did you mean '{hint[0]}'?" if hint else ""
        raise SpaceError(where, f"unknown parameter {shown(parent)}{tip}")
    dim = dims[parent]
    if type(dim).__name__ != "Integer":
        raise SpaceError(where, f"expected an integer parameter, '{parent}' is "
                         f"{type(dim).__name__.lower()}")
    if dim.high < 1 or dim.high > MAX_FOR:
        raise SpaceError(where, f"'{parent}' must count from 1 to at most {MAX_FOR} "
                         f"(its high is {dim.high})")
    out = []
    for k in range(dim.high):
        child = name.replace("{" + var + "}", str(k))
        if not child.isidentifier():
            raise SpaceError(name, f"expands to {shown(child)}, which is not an identifier")
        out.append((child, Condition(parent, op=">", number=float(k))))
    return var, parent, out
