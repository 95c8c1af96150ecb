"""`objective.data.selection`: the events a study trains on, as an expression over branches.

The text is parsed by Python's own grammar (`ast`, mode "eval") and the tree is walked
here, never handed to `eval`: only the nodes below are allowed, so a selection can
compare and combine per-event values and call a few numpy functions, and nothing else (no
attributes but `np.`, no subscripts, no lambdas, no names but branches). Why not eval
with empty globals: spec text reaches every rank of a cluster job, and an expression
such as `().__class__.__base__` escapes any namespace.

- comparisons `<` `<=` `>` `>=` `==` `!=`, chained too (`30 < pt < 300`);
- logic `&` `|` `^` `~`, and `and` `or` `not`, which act event by event here (numpy's
  `&`, `|`, `~` with Python's precedence): a selection is evaluated over all events at once;
- arithmetic `+` `-` `*` `/` `//` `%` `**`, numbers, `True`, `False`;
- the functions of `FUNCTIONS`, bare or as `np.NAME` / `numpy.NAME` (as weaver-core's
  selections write them).

Every other name is a branch (ROOT), dataset (HDF5) or array (npz, npy) holding one
number per event; the result must be true or false per event.
"""
from __future__ import annotations

import ast
import operator

import numpy as np

# name: its number of arguments (checked when parsed: numpy's second positional argument
# of a one-argument function is `out`, which would write into a branch's values)
FUNCTIONS = {**dict.fromkeys(("abs", "sqrt", "log", "log10", "exp", "sin", "cos", "tan",
                              "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
                              "isfinite", "isnan", "floor", "ceil", "sign"), 1),
             **dict.fromkeys(("arctan2", "hypot", "minimum", "maximum"), 2), "where": 3}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow, ast.BitAnd: np.logical_and, ast.BitOr: np.logical_or,
           ast.BitXor: np.logical_xor}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
            ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: np.logical_not,
          ast.Invert: np.logical_not}
_BOOL = {ast.And: np.logical_and, ast.Or: np.logical_or}
_NUMPY = ("np", "numpy")


class SelectionError(ValueError):
    """A selection that does not parse, or that cannot be evaluated on the data."""


class Selection:
    """A parsed selection: `names` (the branches it reads, in order of appearance) and
    `evaluate(columns)` (a boolean per event)."""

    def __init__(self, text: str):
        self.text = text
        try:
            self.tree = ast.parse(text.strip(), mode="eval").body
        except SyntaxError as e:
            where = f" at column {e.offset}" if e.offset else ""
            raise SelectionError(f"does not parse ({e.msg}{where}): {_shown(text)}") from None
        except (ValueError, RecursionError, MemoryError):   # a NUL byte, nesting too deep
            raise SelectionError(f"does not parse: {_shown(text)}") from None
        names: list = []
        try:
            _check(self.tree, names)
        except RecursionError:
            raise SelectionError(f"is nested too deeply: {_shown(text)}") from None
        if not names:
            raise SelectionError(f"names no branch: {_shown(text)} is the same for every event")
        self.names = tuple(dict.fromkeys(names))

    def evaluate(self, columns: dict) -> np.ndarray:
        """Whether each event passes; columns: {name: one number per event}."""
        for name in self.names:
            col = columns[name]
            if col.dtype.kind not in "biuf" or col.ndim != 1:
                raise SelectionError(f"'{name}' is not one number per event "
                                     f"(dtype {col.dtype}, shape {col.shape[1:]} per event)")
        try:
            with np.errstate(all="ignore"):
                result = np.asarray(_value(self.tree, columns))
        except (TypeError, ValueError) as e:   # such as arrays of different lengths
            raise SelectionError(f"cannot be evaluated ({e}): {_shown(self.text)}") from None
        if result.dtype != bool:
            raise SelectionError(f"gives numbers, not true or false per event: compare them "
                                 f"(such as `{self.text.strip()} > 0`)")
        return result


def _shown(text: str) -> str:
    """The selection as quoted in a message: one line, at most 120 characters."""
    return repr(text if len(text) <= 120 else text[:117] + "...")


def _check(node, names: list) -> None:
    """Every node allowed (module docstring), the branch names collected."""
    if isinstance(node, ast.Name):
        if node.id in FUNCTIONS or node.id in _NUMPY:
            raise SelectionError(f"'{node.id}' is a function: call it, as {node.id}(x)")
        names.append(node.id)
        return
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (bool, int, float)):
            return
        raise SelectionError(f"{node.value!r}: only numbers, True and False are values")
    if isinstance(node, ast.Call):
        name = _function(node.func)
        if node.keywords or len(node.args) != FUNCTIONS[name]:
            raise SelectionError(f"{ast.unparse(node)!r}: {name} takes {FUNCTIONS[name]} "
                                 f"argument(s), given plainly")
        for arg in node.args:
            _check(arg, names)
        return
    children = {ast.BinOp: lambda n: (type(n.op) in _BINARY, [n.left, n.right]),
                ast.UnaryOp: lambda n: (type(n.op) in _UNARY, [n.operand]),
                ast.BoolOp: lambda n: (type(n.op) in _BOOL, n.values),
                ast.Compare: lambda n: (all(type(o) in _COMPARE for o in n.ops),
                                        [n.left, *n.comparators])}.get(type(node))
    allowed, parts = children(node) if children else (False, [])
    if not allowed:
        raise SelectionError(f"{ast.unparse(node)!r} is not allowed in a selection (it takes "
                             f"branches, numbers, comparisons, & | ~ and or not, arithmetic "
                             f"and calls of {', '.join(FUNCTIONS)})")
    for part in parts:
        _check(part, names)


def _function(func) -> str:
    """The name of an allowed function: `abs`, `np.abs` or `numpy.abs`."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            and func.value.id in _NUMPY:
        name = func.attr
    elif isinstance(func, ast.Name):
        name = func.id
    else:
        raise SelectionError(f"{ast.unparse(func)!r} is not a function a selection may call")
    if name not in FUNCTIONS:
        raise SelectionError(f"'{name}' is not a function a selection may call "
                             f"(allowed: {', '.join(FUNCTIONS)})")
    return name


def _value(node, columns: dict):
    if isinstance(node, ast.Name):
        return columns[node.id]
    if isinstance(node, ast.Constant):   # numbers as numpy's: 10**10**10 is inf, not a
        return node.value if isinstance(node.value, bool) else np.float64(node.value)  # hang
    if isinstance(node, ast.Call):
        func = getattr(np, _function(node.func))
        return func(*(_value(a, columns) for a in node.args))
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_value(node.left, columns), _value(node.right, columns))
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_value(node.operand, columns))
    if isinstance(node, ast.BoolOp):
        values = [_value(v, columns) for v in node.values]
        out = values[0]
        for v in values[1:]:
            out = _BOOL[type(node.op)](out, v)
        return out
    left, out = _value(node.left, columns), True
    for op, right in zip(node.ops, node.comparators):
        right = _value(right, columns)
        out = np.logical_and(out, _COMPARE[type(op)](left, right))
        left = right
    return out
