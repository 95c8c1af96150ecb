"""A torch model's training fields: `training.loss`, `optimizer`, `lr_scheduler`, `metrics`.

Each of the first three is a torch class name, or a mapping of `name` and the class's
keyword arguments (`{name: AdamW, lr: 1.0e-3, weight_decay: 0.01}`); a search-space entry
`training.optimizer.weight_decay` searches one argument, `training.optimizer.name` the
class. Names are checked here against training.frameworks.torch_names, so a misspelt one
is one line and exit status 2 before any trial, without importing torch. So is a torch
field, or a model file that imports torch, where torch is not installed.
"""
from __future__ import annotations

from pathlib import Path

from mpiopt.errors import SpecError, shown
from mpiopt.spec._reader import _Section, _show
from mpiopt.training.frameworks import torch_names

CALLS = tuple(torch_names.KNOWN)        # loss, optimizer, lr_scheduler


def read_call(sec: _Section, key: str) -> dict | None:
    """{"name": canonical name, argument: value, ...} or None when absent."""
    value = sec.raw(key, None)
    if value is None:
        return None
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        sec.fail(key, f"expected a name or a mapping with 'name' and arguments, got {_show(value)}")
    if "name" not in value:
        sec.fail(f"{key}.name", "required field is missing (the class's name)")
    out = {}
    for arg, given in value.items():
        if not isinstance(arg, str) or not arg.isidentifier():
            sec.fail(key, f"argument names are identifiers, got {shown(arg)}")
        if not _plain(given):
            sec.fail(f"{key}.{arg}", f"expected a number, string, boolean or list, got {_show(given)}")
        out[arg] = given
    name = torch_names.canonical(key, out["name"])
    if name is None:
        sec.fail(f"{key}.name", torch_names.unknown(key, out["name"]))
    out["name"] = name
    if key == "lr_scheduler" and out.get("interval", "epoch") not in torch_names.INTERVALS:
        sec.fail(f"{key}.interval", f"expected epoch or step, got {shown(out['interval'])}")
    if key != "lr_scheduler" and "interval" in out:
        sec.fail(f"{key}.interval", "only training.lr_scheduler has an interval")
    return out


def _plain(value) -> bool:
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def read_metrics(sec: _Section) -> tuple:
    value = sec.raw("metrics", [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        sec.fail("metrics", f"expected a list of metric names, got {_show(value)}")
    for i, name in enumerate(value):
        if name not in torch_names.METRICS:
            sec.fail(f"metrics[{i}]", f"unknown metric {shown(name)}; known: "
                                      f"{', '.join(torch_names.METRICS)} (and loss, always)")
    return tuple(value)


def check_torch(source: str, objective, training, space, check_files: bool) -> None:
    """What ties the torch fields to the other sections: a field needs a model objective;
    searched arguments need their class; torch must be installed where it is named."""
    given = [f"training.{f}" for f in (*CALLS, "metrics") if getattr(training, f)]
    searched = [n for n in space.names if n.split(".")[0] == "training"
                and n.split(".")[1] in CALLS]
    if (given or searched) and objective.model is None:
        raise SpecError(f"{source}: {(given or searched)[0]}: is for a torch model "
                        "(objective.model); a function objective trains its own")
    for name in searched:
        field, arg = name.split(".")[1:]
        if arg != "name" and getattr(training, field) is None \
                and f"training.{field}.name" not in space.names:
            raise SpecError(f"{source}: search_space.{name}: searches an argument of "
                            f"training.{field}, which names no class; give training.{field}: "
                            f"{{name: ...}} (or search training.{field}.name)")
    if not check_files or objective.model is None:
        return
    from mpiopt.refs import imports_of, resolve_ref

    file = Path(resolve_ref(objective.model, None, source, "objective.model")[0])
    imports = imports_of(file)
    if (given or searched) and "torch" not in imports and imports & {"keras", "tensorflow"}:
        raise SpecError(f"{source}: {(given or searched)[0]}: is for a torch model; "
                        f"{file.name} builds a Keras model, which build_model compiles itself")
    if (given or searched) and not torch_names.installed():
        raise SpecError(f"{source}: {(given or searched)[0]}: needs PyTorch, which is not "
                        f"installed: {torch_names.EXTRA}")
    if "torch" in imports and not torch_names.installed():
        raise SpecError(f"{source}: objective.model: {file.name} imports torch, which is not "
                        f"installed: {torch_names.EXTRA}")


def check_searched_call(name: str, entry, source: str, where: str) -> None:
    """A search-space entry `training.<loss|optimizer|lr_scheduler>.<argument>`: a searched
    `name` (or `interval`) offers only names that exist."""
    field, arg = name.split(".")[1:]
    if not arg.isidentifier():
        raise SpecError(f"{source}: {where}: expected training.{field}.ARGUMENT")
    if arg not in ("name", "interval"):
        return
    if arg == "interval" and field != "lr_scheduler":
        raise SpecError(f"{source}: {where}: only training.lr_scheduler has an interval")
    choices = entry if isinstance(entry, list) else (entry or {}).get("choices") \
        if isinstance(entry, dict) and entry.get("type") == "categorical" else None
    if choices is None:
        raise SpecError(f"{source}: {where}: a searched {arg} is categorical: give its choices")
    for choice in choices:
        ok = (torch_names.canonical(field, choice) if arg == "name"
              else choice in torch_names.INTERVALS)
        if not ok:
            raise SpecError(f"{source}: {where}: " + (torch_names.unknown(field, choice)
                            if arg == "name" else f"expected epoch or step, got {shown(choice)}"))
