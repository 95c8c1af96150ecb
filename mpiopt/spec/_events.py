"""`objective.data`'s fields about the events: collections, weights, selection.

What can be checked without the files is checked here (a length below 1, a selection
that does not parse or calls what it may not, a name two inputs would share); what needs
them (a branch that is missing or not jagged, weights that are NaN, a selection that
keeps no event) when the files are opened (mpiopt.training.opening), which `mpiopt
validate` and the start of a study do before any trial.
"""
from __future__ import annotations

import re

from mpiopt.field import REQUIRED, Field, Fields
from mpiopt.spec._reader import _Section, _show
from mpiopt.spec._types import CollectionSpec

COLLECTION = Fields(
    Field("branches", REQUIRED, "list", "Jagged branches (fields of an RNTuple) holding one "
          "value per object, each one channel of the input."),
    Field("length", REQUIRED, "integer", "Objects per event: fewer are padded with "
          "`pad_value`, more are cut (after sorting).", low=1),
    Field("sort_by", None, "text", "A jagged branch of the same objects to order them by "
          "inside each event before the cut (such as their pT).", shown="–"),
    Field("order", "descending", "text", "`descending`: the largest `sort_by` first (the "
          "leading objects are the ones kept); `ascending`: the smallest first.",
          choices=("descending", "ascending")),
    Field("pad_value", 0.0, "number", "The value of every branch in a padded slot."),
    Field("mask", True, "flag", "Also give the input `NAME_mask` of `length` values: 1 for "
          "an object, 0 for padding."),
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def events_fields(sec: _Section, kinds: list, loader: bool) -> dict:
    """collections, weights, balance_classes and selection of a data section, checked."""
    out = {"collections": _collections(sec, kinds),
           "weights": sec.text("weights", None),
           "balance_classes": sec.flag("balance_classes", False),
           "selection": _selection(sec)}
    if out["weights"] is not None and not out["weights"].strip():
        sec.fail("weights", "expected the name of a branch, dataset or array, got ''")
    if loader:
        for key in ("collections", "weights", "selection", "balance_classes"):
            if out[key]:
                sec.fail(key, "applies to data files; a loader returns its own arrays")
    return out


def _selection(sec: _Section):
    from mpiopt.training.selection import Selection, SelectionError

    text = sec.text("selection", None)
    if text is None:
        return None
    try:
        Selection(text)
    except SelectionError as e:
        sec.fail("selection", str(e))
    return text


def _collections(sec: _Section, kinds: list) -> tuple:
    value = sec.raw("collections", None)
    if value is None or value == {}:
        return ()
    if not isinstance(value, dict):
        sec.fail("collections", f"expected a mapping of names to collections, got "
                                f"{_show(value)}")
    if kinds and kinds != ["root"]:
        sec.fail("collections", "collections are read from ROOT files (`root`): jagged "
                                "branches are what they pad")
    taken = {"features"}
    out = []
    for name, settings in value.items():
        if not isinstance(name, str) or not _NAME.match(name):
            sec.fail("collections", f"{name!r} cannot name a model input: letters, digits "
                                    f"and _, not starting with a digit")
        inner = _Section(settings, sec.source, f"{sec.where('collections')}.{name}",
                         COLLECTION.names)
        coll = _collection(inner, name)
        mine = {name, f"{name}_mask"} if coll.mask else {name}
        if mine & taken:
            sec.fail("collections", f"'{name}' gives the input "
                                    f"'{sorted(mine & taken)[0]}', which another input has")
        taken |= mine
        out.append(coll)
    return tuple(out)


def _collection(sec: _Section, name: str) -> CollectionSpec:
    branches = sec.raw("branches")
    if (not isinstance(branches, list) or not branches
            or not all(isinstance(b, str) and b for b in branches)):
        sec.fail("branches", f"expected a non-empty list of branch names, got {_show(branches)}")
    if len(set(branches)) != len(branches):
        sec.fail("branches", "a branch is listed twice")
    plain = {f.name: f.read(sec) for f in COLLECTION if f.plain}
    return CollectionSpec(name=name, branches=tuple(branches), **plain)
