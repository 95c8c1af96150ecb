"""`search_space`: dimensions, conditions (`when`, `for`) and searched training fields."""
from __future__ import annotations

from typing import Any


from mpiopt.errors import SpecError
from mpiopt.space import Space, SpaceError, dimension_from_dict
from mpiopt.spec._reader import _Section, _show

# --------------------------------------------------------------------------- search space
DIMENSION_KEYS = {"real": ("type", "low", "high", "prior", "when", "for"),
                  "integer": ("type", "low", "high", "prior", "when", "for"),
                  "categorical": ("type", "choices", "when", "for")}


def _space(top: _Section, origins: dict | None) -> Space:
    """Build the Space; each entry's errors name the file it came from (spec or include).
    Conditions (`when`, `for`: mpiopt.space.conditions) are read once every dimension exists."""
    entries = top.raw("search_space")
    if not isinstance(entries, dict):
        top.fail("search_space", f"expected a mapping of parameter name -> definition, got {_show(entries)}")
    origins = origins or {}
    dims, raw = {}, {}
    for name, entry in entries.items():
        source, prefix = origins.get(name, (top.source, "search_space"))
        where = f"{prefix}.{name}" if prefix else str(name)
        searched = isinstance(name, str) and name.startswith(SEARCHED_PREFIX)
        if searched:                 # training.batch_size and the like (training/searched.py)
            _check_searched(name, entry, source, where)
        if isinstance(entry, list):  # shorthand: `activation: [relu, tanh]`
            entry = {"type": "categorical", "choices": entry}
        templated = isinstance(entry, dict) and entry.get("for") is not None
        if not isinstance(name, str) or not (name.isidentifier() or templated or searched):
            raise SpecError(f"{source}: {where}: a parameter name must be an identifier")
        dims[name] = _dimension(name, entry, source, prefix)
        raw[name] = entry
    if not dims:
        top.fail("search_space", "expected at least one parameter")

    def fail(exc: SpaceError):
        source, prefix = origins.get(exc.field.split(".")[0], (top.source, "search_space"))
        raise SpecError(f"{source}: {prefix + '.' if prefix else ''}{exc.field}: {exc.message}") from None

    try:
        return _conditional_space(dims, raw)
    except SpaceError as exc:
        fail(exc)


def _conditional_space(dims: dict, raw: dict) -> Space:
    """`for` templates expanded in place (each copy with its implicit `PARENT > k`), `when`
    parsed against the other dimensions, then the Space (which refuses cycles)."""
    from mpiopt.space.conditions import expand_for, parse_when

    plain = {n: d for n, d in dims.items() if raw[n].get("for") is None}
    out, conditions = [], {}
    for name, dim in dims.items():
        when = raw[name].get("when")
        own = parse_when(name, when, plain) if when is not None else ()
        if raw[name].get("for") is None:
            out.append(dim)
            conditions[name] = own
            continue
        _, parent, copies = expand_for(name, raw[name]["for"], plain)
        if any(c.parent == parent for c in own):
            raise SpaceError(f"{name}.when.{parent}", f"`for` already sets the condition on "
                             f"{parent}; leave it out of `when`")
        for child, cond in copies:
            if child in dims:
                raise SpaceError(name, f"expands to {child!r}, which is also a parameter")
            out.append(_renamed(dim, child))
            conditions[child] = own + (cond,)
    return Space(out, conditions)


def _renamed(dim, name: str):
    import dataclasses

    return dataclasses.replace(dim, name=name)


def _check_searched(name: str, entry: Any, source: str, where: str) -> None:
    """`training.<field>` entries: only the fields mpiopt.training.searched can vary."""
    from mpiopt.spec._torch import CALLS, check_searched_call
    from mpiopt.training.searched import SEARCHABLE

    field = name[len(SEARCHED_PREFIX):]
    if field.split(".")[0] in CALLS and field.count(".") == 1:   # training.optimizer.lr
        return check_searched_call(name, entry, source, where)
    if field not in SEARCHABLE:
        raise SpecError(f"{source}: {where}: training.{field} cannot be searched; these can: "
                        + ", ".join([*(f"training.{k}" for k in SEARCHABLE),
                                     *(f"training.{c}.ARGUMENT" for c in CALLS)]))
    kind = entry.get("type") if isinstance(entry, dict) else "categorical"
    if SEARCHABLE[field] is int and kind == "real":
        raise SpecError(f"{source}: {where}: training.{field} takes whole numbers: use "
                        "type integer or categorical")


SEARCHED_PREFIX = "training."


def _dimension(name: str, entry: Any, source: str, prefix: str):
    where = f"{prefix}.{name}" if prefix else name
    if not isinstance(entry, dict):
        raise SpecError(f"{source}: {where}: expected a mapping with 'type' "
                        f"(real, integer or categorical) or a list of choices, got {_show(entry)}")
    kind = entry.get("type")
    if kind not in DIMENSION_KEYS:
        hint = "" if kind is None else f", got {_show(kind)}"
        missing = "required field is missing; expected" if kind is None else "expected"
        raise SpecError(f"{source}: {where}.type: {missing} real, integer or categorical{hint}")
    sec = _Section(entry, source, where, DIMENSION_KEYS[kind])
    required = ("choices",) if kind == "categorical" else ("low", "high")
    for key in required:
        sec.raw(key)
    try:
        return dimension_from_dict(name, entry)
    except SpaceError as exc:
        raise SpecError(f"{source}: {prefix + '.' if prefix else ''}{exc.field}: {exc.message}") from None


