"""Loading: the file, its overrides and includes, every section read, then the rules
that tie two sections together."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from mpiopt.errors import SpecError
from mpiopt.spec._pbt import check_pbt
from mpiopt.spec._reader import _load, _Section
from mpiopt.spec._search import _search
from mpiopt.spec._sections import _check_objectives, _objective, _resources, _study
from mpiopt.spec._space import _space
from mpiopt.spec._storage import _storage
from mpiopt.spec._torch import check_torch
from mpiopt.spec._training import _training
from mpiopt.spec._types import TOP_KEYS

def parse_overrides(items: list[str] | None) -> dict:
    """``["search.trials=10", "study.name=x"]`` -> ``{"search.trials": 10, ...}``; each value
    is read as a YAML scalar, so numbers, booleans and ``[a, b]`` lists keep their type. A
    name given twice is refused: the shell history shows both, and neither is surely meant."""
    result = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise SpecError(f"--set: expected NAME=VALUE (e.g. search.trials=10), got {item!r}")
        name = name.strip()
        if name in result:
            raise SpecError(f"--set {name}: given twice (which one is meant?); give it once")
        try:
            value = _load(text, f"--set {name}") if text.strip() else ""
        except yaml.YAMLError:
            value = text
        result[name] = value
    return result


def _apply_override(raw: dict, dotted: str, value: Any, source: str) -> None:
    keys = dotted.split(".")
    node = raw
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            where = ".".join(keys[: i + 1])
            raise SpecError(f"{source}: {dotted}: cannot set (from --set): {where} is not a mapping")
        node = child
    node[keys[-1]] = copy.deepcopy(value)


# --------------------------------------------------------------------------- sections
def _build(raw: Any, source: str, base_dir: Path, check_files: bool) -> dict:
    if raw is None:
        raise SpecError(f"{source}: (top level): the spec is empty; expected a mapping of sections")
    origins = raw.pop("_origins", None) if isinstance(raw, dict) else None
    top = _Section(raw, source, "", TOP_KEYS, what="a mapping of sections (study, objective, ...)")
    space = _space(top, origins)
    storage, retry, artifacts = _storage(top, base_dir)
    objective, search = _objective(top, base_dir, check_files), _search(top, space)
    _check_objectives(source, objective, search)
    training = _training(top)
    check_torch(source, objective, training, space, check_files)
    check_pbt(source, objective, search, training, space)
    return dict(
        study=_study(top),
        storage=storage,
        storage_retry=retry,
        artifacts=artifacts,
        objective=objective,
        space=space,
        search=search,
        training=training,
        resources=_resources(top),
        base_dir=base_dir,
        source=source,
    )


