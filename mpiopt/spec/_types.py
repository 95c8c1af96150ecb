"""What a loaded spec is: frozen dataclasses, one per section, and `Spec`."""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mpiopt.search import ALGORITHMS
from mpiopt.space import Space

STORAGE_RETRY_S = 600.0   # storage.retry_timeout default: ten minutes of outage ridden out
TOP_KEYS = ("study", "storage", "objective", "search_space", "search", "training", "resources")


# --------------------------------------------------------------------------- dataclasses
@dataclass(frozen=True)
class StudySpec:
    name: str
    description: str = ""


@dataclass(frozen=True)
class DataSpec:
    loader: str | None = None
    npz: list = field(default_factory=list)
    npy: list = field(default_factory=list)
    hdf5: list = field(default_factory=list)
    root: list = field(default_factory=list)
    tree: str = "Events"
    features: str | tuple = "features"     # a tuple of branch names for ROOT files
    labels: str = "labels"
    val_npz: list = field(default_factory=list)
    val_npy: list = field(default_factory=list)
    val_hdf5: list = field(default_factory=list)
    val_root: list = field(default_factory=list)
    in_memory: str | bool = "auto"
    shuffle: str = "exact"
    shuffle_window: int = 65536
    split_by: str = "sample"
    cache: str | None = None


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
    constraints: tuple = ()        # mpiopt.objective.metrics.Constraint, ...
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
    max_failures_in_a_row: int = 10
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


# Late: these modules import the dataclasses above.
from mpiopt.spec._build import _build  # noqa: E402
from mpiopt.spec._includes import _expand_includes  # noqa: E402
from mpiopt.spec._reader import _Dumper, _Flow, _parse_yaml  # noqa: E402
from mpiopt.spec._resolved import (_identity_objective_dict, _objective_dict,  # noqa: E402
                                   _search_dict, _training_dict)
from mpiopt.spec._storage import _storage_dict  # noqa: E402
