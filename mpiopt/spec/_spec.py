"""The whole spec, `Spec` (its sections are the dataclasses of mpiopt.spec._types), and
`load_spec`, which reads one from a file: the YAML, its overrides and includes, every
section read and checked (mpiopt.spec._build), then the resolved form it is stored in."""
from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path

import yaml

from mpiopt import jsontext
from mpiopt.errors import SpecError
from mpiopt.space import Space
from mpiopt.spec._build import _apply_override, _build
from mpiopt.spec._includes import _expand_includes
from mpiopt.spec._reader import _Dumper, _Flow, _parse_yaml
from mpiopt.spec._resolved import (_identity_objective_dict, _objective_dict, _search_dict,
                                   _training_dict)
from mpiopt.spec._storage import _storage_dict
from mpiopt.spec._types import (STORAGE_RETRY_S, ObjectiveSpec, ResourcesSpec, SearchSpec,
                                StudySpec, TrainingSpec)


@dataclass(frozen=True)
class Spec:
    study: StudySpec
    storage: str | None
    objective: ObjectiveSpec
    space: Space
    search: SearchSpec
    training: TrainingSpec
    resources: ResourcesSpec
    base_dir: Path
    source: str
    storage_retry: float = STORAGE_RETRY_S   # storage.retry_timeout: outages ridden out
    artifacts: str | None = None    # storage.artifacts: checkpoints and kept models (a folder)

    @classmethod
    def from_dict(cls, data: dict, source: str = "<stored>", base_dir: Path | str | None = None,
                  check_files: bool = True) -> "Spec":
        """Rebuild from a resolved dict (as stored with a study). ``check_files=False``
        skips the existence checks, for showing a study whose files have moved."""
        raw = copy.deepcopy(data)
        base = Path(base_dir or ".").resolve()
        if isinstance(raw, dict):
            _expand_includes(raw, source, base)
        return cls(**_build(raw, source, base, check_files))

    @classmethod
    def from_text(cls, text: str, source: str = "<stored>", **kwargs) -> "Spec":
        return cls.from_dict(_parse_yaml(text, source), source, **kwargs)

    def to_dict(self) -> dict:
        """The resolved spec: every default filled in, includes expanded, paths absolute."""
        return {
            "study": {"name": self.study.name, "description": self.study.description},
            "storage": _storage_dict(self),
            "objective": _objective_dict(self.objective),
            "search_space": self.space.to_dict(),
            "search": _search_dict(self.search),
            "training": _training_dict(self.training),
            "resources": {"group_size": self.resources.group_size},
        }

    def to_yaml(self) -> str:
        """Block YAML with one line per search-space parameter (readable and diffable)."""
        data = self.to_dict()
        data["search_space"] = {k: _Flow(v) for k, v in data["search_space"].items()}
        return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=100)

    def _identity(self) -> dict:
        """What a study's results depend on: the space and the objective, with file
        references reduced to file names so a moved checkout can still resume."""
        objective = _identity_objective_dict(self.objective)
        for key in ("function", "model"):
            if objective.get(key):
                objective[key] = Path(objective[key]).name
        data = objective.get("data")
        if data:
            for key in ("npz", "hdf5", "val_npz", "val_hdf5"):
                data[key] = [Path(p).name for p in data[key]]
            if data["loader"]:
                data["loader"] = Path(data["loader"]).name
        return {"space": self.space.to_dict(), "objective": objective}

    def fingerprint(self) -> str:
        text = jsontext.exact(self._identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def diff(self, other: "Spec") -> list[str]:
        """Lines describing how other's space and objective differ from self's."""
        lines = self.space.diff(other.space)
        mine, theirs = self._identity()["objective"], other._identity()["objective"]
        for key in sorted(set(mine) | set(theirs)):
            if key == "data" and isinstance(mine.get(key), dict) and isinstance(theirs.get(key), dict):
                lines += _data_diff(mine[key], theirs[key])
            elif mine.get(key) != theirs.get(key):
                lines.append(f"changed objective.{key}: {mine.get(key)!r} -> {theirs.get(key)!r}")
        return lines


def _data_diff(mine: dict, theirs: dict) -> list[str]:
    """The data fields that differ, one line each; a field left out holds the value its
    absence means (its default, or STORED_DEFAULTS' where the default changed)."""
    from mpiopt.spec._resolved import STORED_DEFAULTS

    lines = []
    for key in sorted(set(mine) | set(theirs)):
        a, b = mine.get(key, STORED_DEFAULTS.get(key)), theirs.get(key, STORED_DEFAULTS.get(key))
        if a != b:
            lines.append(f"changed objective.data.{key}: {a!r} -> {b!r}")
    return lines


def load_spec(path: str | Path, overrides: dict | None = None) -> Spec:
    """Read, resolve and validate a spec file; SpecError on the first problem.

    ``overrides`` maps dotted field paths to values (``{"search.trials": 10}``), applied
    after includes are expanded, so ``search_space.lr.high`` reaches an included parameter.
    """
    source = str(path)
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{source}: cannot read the spec: {getattr(exc, 'strerror', None) or exc}") from None
    raw = _parse_yaml(text, source)
    base_dir = file.resolve().parent
    overrides = dict(overrides or {})
    if isinstance(raw, dict):
        include = overrides.pop("search_space.include", None)
        if include is not None:
            _apply_override(raw, "search_space.include", include, source)
        _expand_includes(raw, source, base_dir)
        for dotted, value in overrides.items():
            _apply_override(raw, dotted, value, source)
            if dotted.startswith("search_space."):  # an error there is the override's
                raw.get("_origins", {}).pop(dotted.split(".")[1], None)
    return Spec(**_build(raw, source, base_dir, check_files=True))
