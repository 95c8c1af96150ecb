"""What a loaded spec holds: frozen dataclasses, one per section (the whole spec, `Spec`,
is mpiopt.spec._spec)."""
from __future__ import annotations

from dataclasses import dataclass, field

from mpiopt.search import ALGORITHMS  # noqa: F401  (the spec's algorithm list, read from here)

STORAGE_RETRY_S = 600.0   # storage.retry_timeout default: ten minutes of outage ridden out
TOP_KEYS = ("study", "storage", "objective", "search_space", "search", "training", "resources")


# --------------------------------------------------------------------------- dataclasses
@dataclass(frozen=True)
class StudySpec:
    name: str
    description: str = ""


@dataclass(frozen=True)
class CollectionSpec:
    """One collection of objective.data.collections: per-object jagged branches padded or
    cut to `length` objects (mpiopt.training.rootfiles)."""

    name: str
    branches: tuple
    length: int
    sort_by: str | None = None
    order: str = "descending"
    pad_value: float = 0.0
    mask: bool = True

    def to_dict(self) -> dict:
        """As the spec writes it (the resolved spec: stored, fingerprinted, shown)."""
        return {"branches": list(self.branches), "length": self.length, "sort_by": self.sort_by,
                "order": self.order, "pad_value": self.pad_value, "mask": self.mask}


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
    shuffle: str = "auto"
    shuffle_window: int = 65536
    split_by: str = "auto"
    cache: str | None = None
    collections: tuple = ()                # CollectionSpec, ...
    weights: str | None = None
    balance_classes: bool = False
    selection: str | None = None


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
    # a torch model's (mpiopt.spec._torch): {"name": class, argument: value, ...} or None
    loss: dict | None = None
    optimizer: dict | None = None
    lr_scheduler: dict | None = None
    metrics: tuple = ()             # validation metrics beside the loss (torch_names.METRICS)


@dataclass(frozen=True)
class ResourcesSpec:
    group_size: int = 1
