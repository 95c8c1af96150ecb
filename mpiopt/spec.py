"""The study spec: one YAML file -> a validated, typed, frozen :class:`Spec`.

Every mistake a user can make in the file becomes one SpecError line that names the file,
the dotted field path and what is expected, e.g.::

    spec.yaml: search.trails: unknown field; did you mean 'trials'?

Nothing of the user's code runs while a spec loads: ``file.py:name`` references are
checked on the file's syntax tree (see mpiopt.objective_ref), so every MPI rank and every
query command can load a spec cheaply. The field reference is README.md, "The spec".
"""
from __future__ import annotations

import copy
import difflib
import glob
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mpiopt.errors import SpecError
from mpiopt.objectives import DIRECTIONS, parse_constraint
from mpiopt.objective_ref import check_ref
from mpiopt.search.options import OPTIONS
from mpiopt.space import Space, SpaceError, dimension_from_dict

__all__ = ["Spec", "StudySpec", "ObjectiveSpec", "DataSpec", "SearchSpec", "TrainingSpec",
           "EarlyStoppingSpec", "PruningSpec", "ResourcesSpec", "load_spec", "parse_overrides",
           "shipped_searchspaces"]

REQUIRED = object()
STORAGE_RETRY_S = 600.0   # storage.retry_timeout default: ten minutes of outage ridden out
TOP_KEYS = ("study", "storage", "objective", "search_space", "search", "training", "resources")
ALGORITHMS = tuple(sorted(OPTIONS))   # auto, bayesian, cmaes, evolutionary, random, tpe


# --------------------------------------------------------------------------- dataclasses
@dataclass(frozen=True)
class StudySpec:
    name: str
    description: str = ""


@dataclass(frozen=True)
class DataSpec:
    loader: str | None = None
    npz: list = field(default_factory=list)
    hdf5: list = field(default_factory=list)
    features: str = "features"
    labels: str = "labels"
    val_npz: list = field(default_factory=list)
    val_hdf5: list = field(default_factory=list)


@dataclass(frozen=True)
class ObjectiveSpec:
    function: str | None = None
    model: str | None = None
    data: DataSpec | None = None
    metric: str = "value"          # the primary objective: the first of `metrics`
    direction: str = "minimize"
    isolate: bool = True
    # several objectives, in order ((name, direction), ...): empty for a single objective
    metrics: tuple = ()
    constraints: tuple = ()        # mpiopt.objectives.Constraint, ...
    reference: tuple = ()          # ((name, value), ...): the hypervolume's reference point

    @property
    def objectives(self) -> tuple:
        """((name, direction), ...): every objective, the primary one first."""
        return self.metrics or ((self.metric, self.direction),)

    @property
    def vector(self) -> bool:
        """Searchers are told vectors (several objectives, or constraints to weigh)."""
        return len(self.objectives) > 1 or bool(self.constraints)


@dataclass(frozen=True)
class SearchSpec:
    algorithm: str
    trials: int
    seed: int = 0
    target: float | None = None
    time_limit: float | None = None
    max_initial_failures: int = 5
    options: dict = field(default_factory=dict)
    trial_timeout: float | None = None
    grace: float = 300.0
    max_attempts: int = 2
    initial_trials: tuple = ()          # parameter sets queued when the study is created
    warm_start: str | None = None       # a study in the same database told first
    keep_models: int = 1                # the trained models of the best k trials are kept


@dataclass(frozen=True)
class EarlyStoppingSpec:
    patience: int = 3
    min_delta: float = 0.0


@dataclass(frozen=True)
class PruningSpec:
    pruner: str = "median"
    warmup_epochs: int = 1
    min_trials: int = 5
    reduction_factor: int = 3
    min_epoch: int = 1


@dataclass(frozen=True)
class TrainingSpec:
    epochs: int = 10
    batch_size: int = 64
    mode: str = "allreduce"
    sync_every: int = 1
    easgd_alpha: float = 0.5
    easgd_period: int = 4
    kfold: int = 1
    holdout: float = 0.2
    early_stopping: EarlyStoppingSpec | None = None
    pruning: PruningSpec | None = None
    shuffle: bool = True
    checkpoint_every: int = 1       # epochs between checkpoints (0: none); mpiopt.artifacts
    refit: bool = False             # train the best parameters once more on all the data


@dataclass(frozen=True)
class ResourcesSpec:
    group_size: int = 1


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
        return _build(raw, source, base, check_files)

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
        text = json.dumps(self._identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def diff(self, other: "Spec") -> list[str]:
        """Lines describing how other's space and objective differ from self's."""
        lines = self.space.diff(other.space)
        mine, theirs = self._identity()["objective"], other._identity()["objective"]
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) != theirs.get(key):
                lines.append(f"changed objective.{key}: {mine.get(key)!r} -> {theirs.get(key)!r}")
        return lines


# --------------------------------------------------------------------------- loading
def load_spec(path: str | Path, overrides: dict | None = None) -> Spec:
    """Read, resolve and validate a spec file; SpecError on the first problem.

    ``overrides`` maps dotted field paths to values (``{"search.trials": 10}``), applied
    after includes are expanded, so ``search_space.lr.high`` reaches an included parameter.
    """
    source = str(path)
    file = Path(path)
    try:
        text = file.read_text()
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
    return _build(raw, source, base_dir, check_files=True)


def parse_overrides(items: list[str] | None) -> dict:
    """``["search.trials=10", "study.name=x"]`` -> ``{"search.trials": 10, ...}``; each value
    is read as a YAML scalar, so numbers, booleans and ``[a, b]`` lists keep their type."""
    result = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise SpecError(f"--set: expected NAME=VALUE (e.g. search.trials=10), got {item!r}")
        try:
            value = yaml.load(text, Loader=_Loader) if text.strip() else ""
        except yaml.YAMLError:
            value = text
        result[name.strip()] = value
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


# --------------------------------------------------------------------------- YAML
class _Loader(yaml.SafeLoader):
    """SafeLoader that reads 1e-4 as a float (YAML 1.1 wants 1.0e-4) and refuses
    duplicate keys instead of silently keeping the last one."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _construct_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _Flow(dict):
    """A mapping written on one line."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Flow, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True))
_Dumper.add_representer(list, lambda d, v: d.represent_sequence(
    "tag:yaml.org,2002:seq", v, flow_style=all(not isinstance(x, (dict, list)) for x in v)))


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "YAML"
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        message = f"{problem} ({context})" if context else problem
        raise SpecError(f"{source}: {where}: invalid YAML: {' '.join(message.split())}") from None


# --------------------------------------------------------------------------- reading helpers
def _show(value: Any) -> str:
    kinds = {bool: "a boolean", dict: "a mapping", list: "a list", type(None): "null"}
    if type(value) in (dict, list, type(None)):
        return kinds[type(value)]
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    return f"{value!r}"


class _Section:
    """One mapping of the spec: refuses unknown keys, reads typed fields, and knows the
    file and dotted path to put in front of every message."""

    def __init__(self, data: Any, source: str, path: str, keys: tuple, what: str = "a mapping"):
        self.source, self.path = source, path
        if not isinstance(data, dict):
            self.fail(None, f"expected {what}, got {_show(data)}")
        self.data = data
        for key in data:
            if key not in keys:
                hint = difflib.get_close_matches(str(key), keys, n=1, cutoff=0.6)
                tip = f"did you mean '{hint[0]}'?" if hint else f"expected one of: {', '.join(keys)}"
                self.fail(key, f"unknown field; {tip}")

    def where(self, key: Any) -> str:
        if key is None:
            return self.path or "(top level)"
        return f"{self.path}.{key}" if self.path else str(key)

    def fail(self, key: Any, message: str):
        raise SpecError(f"{self.source}: {self.where(key)}: {message}")

    def raw(self, key: str, default: Any = REQUIRED) -> Any:
        if key not in self.data:
            if default is REQUIRED:
                self.fail(key, "required field is missing")
            return default
        return self.data[key]

    def text(self, key, default=REQUIRED, choices=None, nullable=False) -> Any:
        value = self.raw(key, default)
        if value is None and (nullable or default is None):
            return None
        if not isinstance(value, str):
            self.fail(key, f"expected a string, got {_show(value)}")
        if choices and value not in choices:
            self.fail(key, f"expected one of {', '.join(choices)}, got {value!r}")
        if not choices and not value.strip() and default is REQUIRED:
            self.fail(key, "must not be empty")
        return value

    def integer(self, key, default=REQUIRED, minimum=None, nullable=False) -> Any:
        value = self.raw(key, default)
        if value is None and (nullable or default is None):
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"expected an integer, got {_show(value)}")
        if minimum is not None and value < minimum:
            self.fail(key, f"must be at least {minimum}, got {value}")
        return value

    def number(self, key, default=REQUIRED, low=None, high=None, nullable=False,
              open_low=False, open_high=False) -> Any:
        value = self.raw(key, default)
        if value is None and (nullable or default is None):
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(key, f"expected a finite number, got {_show(value)}")
        too_low = low is not None and (value <= low if open_low else value < low)
        too_high = high is not None and (value >= high if open_high else value > high)
        if too_low or too_high:
            lo, hi = ("(" if open_low else "["), (")" if open_high else "]")
            self.fail(key, f"must be in {lo}{_num(low)}, {_num(high)}{hi}, got {value}")
        return float(value)

    def flag(self, key, default=REQUIRED) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            self.fail(key, f"expected true or false, got {_show(value)}")
        return value

    def section(self, key, keys, default=REQUIRED) -> "_Section | None":
        value = self.raw(key, default)
        if value is None and default is REQUIRED:
            self.fail(key, "required section is empty")
        if value is None:
            value = default
        return _Section(value, self.source, self.where(key), keys)


def _num(x):
    return "inf" if x is None else x


# --------------------------------------------------------------------------- sections
def _build(raw: Any, source: str, base_dir: Path, check_files: bool) -> Spec:
    if raw is None:
        raise SpecError(f"{source}: (top level): the spec is empty; expected a mapping of sections")
    origins = raw.pop("_origins", None) if isinstance(raw, dict) else None
    top = _Section(raw, source, "", TOP_KEYS, what="a mapping of sections (study, objective, ...)")
    space = _space(top, origins)
    storage, retry, artifacts = _storage(top, base_dir)
    objective, search = _objective(top, base_dir, check_files), _search(top, space)
    _check_objectives(source, objective, search)
    return Spec(
        study=_study(top.section("study", ("name", "description"))),
        storage=storage,
        storage_retry=retry,
        artifacts=artifacts,
        objective=objective,
        space=space,
        search=search,
        training=_training(top),
        resources=_resources(top),
        base_dir=base_dir,
        source=source,
    )


def _study(sec: _Section) -> StudySpec:
    return StudySpec(name=sec.text("name"), description=sec.text("description", ""))


def _resources(top: _Section) -> ResourcesSpec:
    sec = top.section("resources", ("group_size",), default={})
    return ResourcesSpec(group_size=sec.integer("group_size", 1, minimum=1))


def _objective(top: _Section, base_dir: Path, check_files: bool) -> ObjectiveSpec:
    sec = top.section("objective", ("function", "model", "data", "metric", "direction", "isolate",
                                    "metrics", "constraints", "reference"))
    has_function, has_model = "function" in sec.data, "model" in sec.data
    if has_function and has_model:
        sec.fail(None, "give either 'function' or 'model' (with 'data'), not both")
    if not has_function and not has_model:
        sec.fail("function", "required field is missing (or give 'model' and 'data')")
    kind = "function" if has_function else "model"
    ref = _ref(sec, kind, base_dir, check_files)
    data = None
    if has_model:
        data = _data(sec.section("data", DATA_KEYS), base_dir, check_files)
    elif "data" in sec.data:
        sec.fail("data", "is only used with 'model'; a function objective loads its own data")
    metrics = _metrics(sec)
    if metrics and ("metric" in sec.data or "direction" in sec.data):
        sec.fail("metrics", "give either 'metric' and 'direction' or 'metrics', not both")
    first = metrics[0] if metrics else None
    return ObjectiveSpec(
        function=ref if has_function else None,
        model=ref if has_model else None,
        data=data,
        metric=first[0] if first else sec.text("metric", "value" if has_function else "val_loss"),
        direction=first[1] if first else sec.text("direction", "minimize",
                                                  choices=("minimize", "maximize")),
        isolate=sec.flag("isolate", True),
        metrics=metrics if len(metrics) > 1 else (),
        constraints=_constraints(sec),
        reference=_reference(sec, metrics),
    )


def _metrics(sec: _Section) -> tuple:
    """objective.metrics: {name: minimize|maximize, ...}, in the order written."""
    raw = sec.raw("metrics", None)
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw:
        sec.fail("metrics", f"expected a mapping of metric names to minimize or maximize, "
                            f"got {_show(raw)}")
    out = []
    for name, direction in raw.items():
        if not isinstance(name, str) or not name.strip():
            sec.fail("metrics", f"expected metric names, got {_show(name)}")
        if direction not in DIRECTIONS:
            sec.fail(f"metrics.{name}", f"expected minimize or maximize, got {_show(direction)}")
        out.append((name, direction))
    return tuple(out)


def _constraints(sec: _Section) -> tuple:
    raw = sec.raw("constraints", None)
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        sec.fail("constraints", f"expected a list like ['n_params <= 200000'], got {_show(raw)}")
    return tuple(parse_constraint(item, lambda msg, i=i: sec.fail(f"constraints[{i}]", msg))
                 for i, item in enumerate(raw))


def _reference(sec: _Section, metrics: tuple) -> tuple:
    raw = sec.raw("reference", None)
    if raw is None:
        return ()
    names = [n for n, _ in metrics]
    if len(names) < 2:
        sec.fail("reference", "is the hypervolume's reference point: it needs 'metrics' with "
                              "two or more objectives")
    if not isinstance(raw, dict) or set(raw) != set(names):
        sec.fail("reference", f"expected a value for each of {', '.join(names)}, got {_show(raw)}")
    for name in names:
        value = raw[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            sec.fail(f"reference.{name}", f"expected a finite number, got {_show(value)}")
    return tuple((n, float(raw[n])) for n in names)


def _check_objectives(source: str, objective: ObjectiveSpec, search: SearchSpec) -> None:
    """Several objectives or constraints need a searcher that takes vectors; a target is
    one number, so it needs one objective."""
    from mpiopt.search import VECTOR_ALGORITHMS

    what = "several objectives" if objective.metrics else "constraints"
    if objective.vector and search.algorithm not in VECTOR_ALGORITHMS:
        raise SpecError(f"{source}: search.algorithm: {search.algorithm} optimizes one "
                        f"objective without constraints; with {what} use "
                        f"{', '.join(VECTOR_ALGORITHMS)}")
    if objective.vector and search.algorithm == "evolutionary" and search.options.get("cma"):
        raise SpecError(f"{source}: search.evolutionary.cma: CMA-ES takes one objective; with "
                        f"{what} leave it off (NSGA-II)")
    if objective.vector and search.warm_start:
        raise SpecError(f"{source}: search.warm_start: told results are single values; a study "
                        f"with {what} cannot be warm-started yet (enqueue good sets instead)")
    if objective.metrics and search.target is not None:
        raise SpecError(f"{source}: search.target: a target is one value; a study with "
                        "several objectives has none (set search.trials or time_limit)")


def _ref(sec: _Section, key: str, base_dir: Path, check_files: bool) -> str:
    value = sec.text(key)
    if check_files:
        return check_ref(value, base_dir, sec.source, sec.where(key))
    from mpiopt.objective_ref import resolve_ref

    file, name = resolve_ref(value, base_dir, sec.source, sec.where(key))
    return f"{file}:{name}"


DATA_KEYS = ("loader", "npz", "hdf5", "features", "labels", "val_npz", "val_hdf5")


def _data(sec: _Section, base_dir: Path, check_files: bool) -> DataSpec:
    loader = _ref(sec, "loader", base_dir, check_files) if "loader" in sec.data else None
    files = {k: _paths(sec, k, base_dir, check_files) for k in ("npz", "hdf5", "val_npz", "val_hdf5")}
    if loader and (files["npz"] or files["hdf5"]):
        sec.fail("loader", "give either a 'loader' or data files (npz/hdf5), not both")
    if not loader and not files["npz"] and not files["hdf5"]:
        sec.fail(None, "expected a 'loader' (file.py:name) or data files ('npz' or 'hdf5')")
    if loader and (files["val_npz"] or files["val_hdf5"]):
        sec.fail("val_npz" if files["val_npz"] else "val_hdf5",
                 "validation files go with npz/hdf5 data; a loader returns its own split")
    return DataSpec(loader=loader, features=sec.text("features", "features"),
                    labels=sec.text("labels", "labels"), **files)


def _paths(sec: _Section, key: str, base_dir: Path, check_files: bool) -> list:
    """A path or list of paths (globs for HDF5), made absolute; each must match a file."""
    value = sec.raw(key, [])
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) and v for v in items):
        sec.fail(key, f"expected a path or a list of paths, got {_show(value)}")
    result = []
    for item in items:
        path = Path(item).expanduser()
        path = path if path.is_absolute() else base_dir / path
        if check_files and not glob.glob(str(path)):
            sec.fail(key, f"no file matches {item!r} (looked for {path})")
        result.append(str(path))
    return result


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(d|h|m|s)?")
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1, None: 1}


def _duration(sec: _Section, key: str) -> float | None:
    value = sec.raw(key, None)
    if value is None:
        return None
    if isinstance(value, str):
        text = value.replace(" ", "")
        parts = list(_DURATION.finditer(text))
        if not text or "".join(p.group(0) for p in parts) != text:
            sec.fail(key, f"expected seconds or a duration like '90s', '10m', '2h', '1h30m', got {value!r}")
        value = sum(float(p.group(1)) * _UNITS[p.group(2)] for p in parts)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        sec.fail(key, f"expected seconds or a duration like '10m', got {_show(value)}")
    if not math.isfinite(value) or value <= 0:
        sec.fail(key, f"must be a positive duration, got {value}")
    return float(value)


def _storage(top: _Section, base_dir: Path) -> tuple[str | None, float, str | None]:
    """`storage: URL` or `storage: {url: URL, retry_timeout: 10m, artifacts: DIR}`. A
    relative SQLite path (and a relative artifacts folder) is relative to the spec file
    (stored absolute), so a resume from any directory finds the same database."""
    value = top.raw("storage", None)
    retry, artifacts = STORAGE_RETRY_S, None
    if isinstance(value, dict):
        sec = top.section("storage", ("url", "retry_timeout", "artifacts"))
        value = sec.text("url", default=None)
        retry = _duration(sec, "retry_timeout") or STORAGE_RETRY_S
        artifacts = sec.text("artifacts", default=None)
        if artifacts is not None:
            artifacts = str((base_dir / Path(artifacts).expanduser()).resolve())
    elif value is not None:
        value = top.text("storage", default=None)
    return (_anchor_sqlite(value, base_dir) if value else None), retry, artifacts


def _storage_dict(spec: "Spec"):
    """A plain URL unless retry_timeout or artifacts differ from their defaults."""
    if spec.storage_retry == STORAGE_RETRY_S and spec.artifacts is None:
        return spec.storage
    out = {"url": spec.storage, "retry_timeout": spec.storage_retry}
    if spec.artifacts is not None:
        out["artifacts"] = spec.artifacts
    return out


def _anchor_sqlite(url: str, base_dir: Path) -> str:
    prefix = next((p for p in ("sqlite:///", "sqlite+pysqlite:///") if url.startswith(p)), None)
    if prefix is None:
        return url
    path = url[len(prefix):]
    if not path or path.startswith("/") or path.startswith(":memory:") or path.startswith("file:"):
        return url
    return prefix + str((base_dir / path).resolve())


SEARCH_KEYS = ("algorithm", "trials", "seed", "target", "time_limit", "max_initial_failures",
               "trial_timeout", "grace", "max_attempts", "initial_trials",
               "warm_start", "keep_models") + ALGORITHMS


def _search(top: _Section, space: Space) -> SearchSpec:
    sec = top.section("search", SEARCH_KEYS)
    algorithm = sec.text("algorithm", "auto", choices=ALGORITHMS)
    trials = sec.integer("trials", minimum=1)
    options = {name: _algorithm_options(sec, name, space) for name in ALGORITHMS}
    return SearchSpec(
        algorithm=algorithm,
        trials=trials,
        seed=sec.integer("seed", 0, minimum=0),
        target=sec.number("target", None),
        time_limit=_duration(sec, "time_limit"),
        max_initial_failures=sec.integer("max_initial_failures", 5, minimum=1),
        options=options[algorithm],
        trial_timeout=_duration(sec, "trial_timeout"),
        grace=_duration(sec, "grace") or 300.0,
        max_attempts=sec.integer("max_attempts", 2, minimum=1),
        initial_trials=_initial_trials(sec, space),
        warm_start=sec.text("warm_start", None),
        keep_models=sec.integer("keep_models", 1, minimum=0),
    )


def _initial_trials(sec: _Section, space: Space) -> tuple:
    """search.initial_trials: complete parameter sets inside the space, each error naming
    `search.initial_trials[i].name`."""
    entries = sec.raw("initial_trials", [])
    if entries is None:
        return ()
    if not isinstance(entries, list):
        sec.fail("initial_trials", f"expected a list of parameter mappings, got {_show(entries)}")
    out = []
    for i, entry in enumerate(entries):
        try:
            out.append(space.parameter_set(entry))
        except SpaceError as exc:
            field = "" if exc.field == "params" else f".{exc.field}"
            sec.fail(f"initial_trials[{i}]{field}", exc.message)
    return tuple(out)


def _algorithm_options(search: _Section, algorithm: str, space: Space) -> dict:
    """`search.<algorithm>`, validated from the one declaration of the searchers' options
    (mpiopt.search.options), plus the rules that tie two options or the space together."""
    declared = OPTIONS[algorithm]
    sec = search.section(algorithm, tuple(o.name for o in declared), default={})
    opts = {o.name: o.read(sec) for o in declared}
    if algorithm == "evolutionary":
        if opts["tournament"] > opts["population"]:
            sec.fail("tournament", f"must not exceed population ({opts['population']}), got {opts['tournament']}")
        if opts["elitism"] >= opts["population"]:
            sec.fail("elitism", f"must be less than population ({opts['population']}), got {opts['elitism']}")
        if opts["cma"]:
            other = [d.name for d in space if type(d).__name__ != "Real"]
            if other:
                sec.fail("cma", f"CMA-ES needs an all-real search space; '{other[0]}' is not real")
    return opts


TRAINING_KEYS = ("epochs", "batch_size", "mode", "sync_every", "easgd_alpha", "easgd_period",
                 "kfold", "holdout", "early_stopping", "pruning", "shuffle", "checkpoint_every",
                 "refit")


def _training(top: _Section) -> TrainingSpec:
    sec = top.section("training", TRAINING_KEYS, default={})
    return TrainingSpec(
        epochs=sec.integer("epochs", 10, minimum=1),
        batch_size=sec.integer("batch_size", 64, minimum=1),
        mode=sec.text("mode", "allreduce", choices=("allreduce", "downpour", "easgd")),
        sync_every=sec.integer("sync_every", 1, minimum=1),
        easgd_alpha=sec.number("easgd_alpha", 0.5, low=0.0, high=1.0, open_low=True),
        easgd_period=sec.integer("easgd_period", 4, minimum=1),
        kfold=sec.integer("kfold", 1, minimum=1),
        holdout=sec.number("holdout", 0.2, low=0.0, high=1.0, open_low=True, open_high=True),
        early_stopping=_optional(sec, "early_stopping", _early_stopping),
        pruning=_optional(sec, "pruning", _pruning),
        shuffle=sec.flag("shuffle", True),
        checkpoint_every=sec.integer("checkpoint_every", 1, minimum=0),
        refit=sec.flag("refit", False),
    )


def _optional(sec: _Section, key: str, build):
    """null/false = off, true = defaults, a mapping = these settings."""
    value = sec.raw(key, None)
    if value is None or value is False:
        return None
    return build(_Section({} if value is True else value, sec.source, sec.where(key),
                          build.KEYS, what="a mapping, true or null"))


def _early_stopping(sec: _Section) -> EarlyStoppingSpec:
    return EarlyStoppingSpec(patience=sec.integer("patience", 3, minimum=1),
                             min_delta=sec.number("min_delta", 0.0, low=0.0))


def _pruning(sec: _Section) -> PruningSpec:
    return PruningSpec(
        pruner=sec.text("pruner", "median", choices=("median", "asha")),
        warmup_epochs=sec.integer("warmup_epochs", 1, minimum=0),
        min_trials=sec.integer("min_trials", 5, minimum=1),
        reduction_factor=sec.integer("reduction_factor", 3, minimum=2),
        min_epoch=sec.integer("min_epoch", 1, minimum=1),
    )


_early_stopping.KEYS = ("patience", "min_delta")
_pruning.KEYS = ("pruner", "warmup_epochs", "min_trials", "reduction_factor", "min_epoch")


# --------------------------------------------------------------------------- search space
DIMENSION_KEYS = {"real": ("type", "low", "high", "prior", "when", "for"),
                  "integer": ("type", "low", "high", "prior", "when", "for"),
                  "categorical": ("type", "choices", "when", "for")}


def _space(top: _Section, origins: dict | None) -> Space:
    """Build the Space; each entry's errors name the file it came from (spec or include).
    Conditions (`when`, `for`: mpiopt.conditions) are read once every dimension exists."""
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
    from mpiopt.conditions import expand_for, parse_when

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
    from mpiopt.training.searched import SEARCHABLE

    field = name[len(SEARCHED_PREFIX):]
    if field not in SEARCHABLE:
        raise SpecError(f"{source}: {where}: training.{field} cannot be searched; these can: "
                        + ", ".join(f"training.{k}" for k in SEARCHABLE))
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


# --------------------------------------------------------------------------- includes
def shipped_searchspaces() -> Path:
    """The searchspaces/ shipped with mpiopt (inside the wheel, or the source checkout)."""
    import mpiopt

    package = Path(mpiopt.__file__).resolve().parent
    for candidate in (package / "_searchspaces", package.parent / "searchspaces"):
        if candidate.is_dir():
            return candidate
    return package / "_searchspaces"


def _expand_includes(raw: dict, source: str, base_dir: Path) -> None:
    """Replace search_space.include by the parameters of the named files; inline entries
    replace included ones of the same name, and `name: null` drops an included one.
    Records where each entry came from in raw['_origins'] for error messages."""
    entries = raw.get("search_space")
    if not isinstance(entries, dict) or "include" not in entries:
        return
    entries = dict(entries)
    include = entries.pop("include")
    names = [include] if isinstance(include, str) else include
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
        raise SpecError(f"{source}: search_space.include: expected a name or a list of names/paths, "
                        f"got {_show(include)}")
    merged, origins = {}, {}
    for name in names:
        file = _find_include(name, source, base_dir)
        for key, entry in _read_include(file).items():
            merged[key] = entry
            origins[key] = (str(file), "")
    for key, entry in entries.items():
        if entry is None:
            merged.pop(key, None)
            origins.pop(key, None)
        else:
            merged[key] = entry
            origins.pop(key, None)
    raw["search_space"] = merged
    raw["_origins"] = origins


def _find_include(name: str, source: str, base_dir: Path) -> Path:
    local = Path(name).expanduser()
    local = local if local.is_absolute() else base_dir / local
    for candidate in (local, local.with_name(local.name + ".yaml")):
        if candidate.is_file():
            return candidate
    shipped = shipped_searchspaces()
    stem = Path(name).stem if name.endswith((".yaml", ".yml")) else name
    file = shipped / f"{stem}.yaml"
    if "/" not in name and file.is_file():
        return file
    known = sorted(p.stem for p in shipped.glob("*.yaml"))
    hint = difflib.get_close_matches(stem, known, n=1)
    tip = f"did you mean '{hint[0]}'? " if hint else ""
    raise SpecError(f"{source}: search_space.include: unknown search space {name!r}; {tip}"
                    f"expected a file relative to the spec or one of: {', '.join(known)}")


def _read_include(file: Path) -> dict:
    data = _parse_yaml(file.read_text(), str(file))
    if not isinstance(data, dict) or not data:
        raise SpecError(f"{file}: (top level): expected a mapping of parameter name -> definition")
    if "include" in data:
        raise SpecError(f"{file}: include: an included search space cannot include others")
    return copy.deepcopy(data)


# --------------------------------------------------------------------------- resolved dicts
def _objective_dict(obj: ObjectiveSpec) -> dict:
    """The resolved objective section; it loads back with from_dict (on every MPI rank,
    and from the database on resume): no null loader, no empty file lists."""
    out = _identity_objective_dict(obj)
    data = out.get("data")
    if data:
        out["data"] = {k: v for k, v in data.items() if v not in (None, [])}
    out["isolate"] = obj.isolate
    return out


def _identity_objective_dict(obj: ObjectiveSpec) -> dict:
    """The objective as fingerprinted since the first release: its shape must not change,
    or stored studies could no longer be resumed."""
    out = {"function": obj.function} if obj.function else {"model": obj.model}
    if obj.data is not None:
        d = obj.data
        out["data"] = {"loader": d.loader, "npz": list(d.npz), "hdf5": list(d.hdf5),
                       "features": d.features, "labels": d.labels,
                       "val_npz": list(d.val_npz), "val_hdf5": list(d.val_hdf5)}
    out.update(metric=obj.metric, direction=obj.direction)
    if obj.metrics:          # only when given: single-objective fingerprints stay as they were
        del out["metric"], out["direction"]
        out["metrics"] = dict(obj.metrics)
    if obj.constraints:
        out["constraints"] = [c.text() for c in obj.constraints]
    if obj.reference:
        out["reference"] = dict(obj.reference)
    return out


def _search_dict(s: SearchSpec) -> dict:
    out = {"algorithm": s.algorithm, "trials": s.trials, "seed": s.seed, "target": s.target,
           "time_limit": s.time_limit, "max_initial_failures": s.max_initial_failures,
           "trial_timeout": s.trial_timeout, "grace": s.grace, "max_attempts": s.max_attempts}
    if s.initial_trials:                # (absent when unused: older stored specs compare equal)
        out["initial_trials"] = [dict(p) for p in s.initial_trials]
    if s.warm_start:
        out["warm_start"] = s.warm_start
    if s.keep_models != 1:              # (absent at its default, as above)
        out["keep_models"] = s.keep_models
    if s.options:
        out[s.algorithm] = dict(s.options)
    return out


def _training_dict(t: TrainingSpec) -> dict:
    names = ("epochs", "batch_size", "mode", "sync_every", "easgd_alpha", "easgd_period",
             "kfold", "holdout")
    out = {n: getattr(t, n) for n in names}
    out["early_stopping"] = vars(t.early_stopping).copy() if t.early_stopping else None
    out["pruning"] = vars(t.pruning).copy() if t.pruning else None
    out["shuffle"] = t.shuffle
    if t.checkpoint_every != 1:         # absent at their defaults: older stored specs compare equal
        out["checkpoint_every"] = t.checkpoint_every
    if t.refit:
        out["refit"] = True
    return out
