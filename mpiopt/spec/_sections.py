"""`study`, `resources`, `objective` (with `data`, several objectives and constraints)."""
from __future__ import annotations

import glob
import math
from pathlib import Path


from mpiopt.errors import SpecError, shown
from mpiopt.field import REQUIRED, Field, Fields
from mpiopt.objective.metrics import DIRECTIONS, parse_constraint
from mpiopt.refs import check_ref
from mpiopt.spec._events import events_fields
from mpiopt.spec._reader import _Section, _show
from mpiopt.spec._types import DataSpec, ObjectiveSpec, ResourcesSpec, SearchSpec, StudySpec

STUDY = Fields(
    Field("name", REQUIRED, "text", "The study's name, unique per storage: letters, digits, `_`, "
          "`-` and `.`, starting with a letter, a digit or `_` (it names files and appears in the "
          "commands mpiopt prints). Starting a study whose name exists is refused unless it is "
          "resumed."),
    Field("description", "", "text", "Free text, stored with the study."),
)
RESOURCES = Fields(
    Field("group_size", 1, "integer", "MPI ranks that work on one trial together. With "
          "`mpirun -n N`, rank 0 coordinates and the other N-1 ranks form (N-1)/group_size "
          "groups. `--group-size` overrides it.", low=1),
)
OBJECTIVE = Fields(
    Field("function", None, "ref", "Called as `name(params)` with the "
          "trial's parameter dict (or `name(params, comm=...)` if it accepts `comm`: the group's "
          "communicator). Returns a float or a dict of metrics.", shown="–"),
    Field("model", None, "ref", "A function `build_model(params)` returning a Keras model. "
          "Needs `data`.", shown="–"),
    Field("data", None, "mapping", "Only with `model`; see below.", shown="–"),
    Field("metric", None, "text", "The figure of merit: for a function returning a dict, the key "
          "to use (`value` means the returned float); for a model, a Keras metric name.",
          shown="`value` (function), `val_loss` (model)"),
    Field("direction", "minimize", "text", "Whether smaller or larger values are better.",
          choices=DIRECTIONS),
    Field("isolate", True, "flag", "Run a `function` that does not take `comm` in a worker "
          "process of its own (one per rank, kept warm between trials), so that `sys.exit`, "
          "`os._exit`, a segfault, the OOM killer or a timeout end the trial, not the job. "
          "`false` runs it in the rank's process (see \"When things go wrong\"). Keras models "
          "always run in the rank's process."),
    Field("metrics", None, "mapping", "Several objectives instead of `metric`/`direction`: "
          "`{name: minimize or maximize, ...}`, the first one primary (see \"Several objectives "
          "and constraints\").", shown="–"),
    Field("constraints", [], "list", "Strings `metric <= number` (or `<`, `>=`, `>`): a trial "
          "that breaks one is infeasible, never on the front or best."),
    Field("reference", None, "mapping", "With `metrics`: the hypervolume's reference point, a "
          "value per objective (default: the worst value seen).", shown="–"),
)


def _study(top: _Section) -> StudySpec:
    from mpiopt.names import name_problem

    section = top.section("study", STUDY.names)
    given = STUDY.read(section)
    problem = name_problem(given["name"])
    if problem:
        section.fail("name", f"{shown(given['name'])} {problem}")
    return StudySpec(**given)


def _resources(top: _Section) -> ResourcesSpec:
    return ResourcesSpec(**RESOURCES.read(top.section("resources", RESOURCES.names, default={})))


def _objective(top: _Section, base_dir: Path, check_files: bool) -> ObjectiveSpec:
    sec = top.section("objective", OBJECTIVE.names)
    has_function, has_model = "function" in sec.data, "model" in sec.data
    if has_function and has_model:
        sec.fail(None, "give either 'function' or 'model' (with 'data'), not both")
    if not has_function and not has_model:
        sec.fail("function", "required field is missing (or give 'model' and 'data')")
    kind = "function" if has_function else "model"
    ref = _ref(sec, kind, base_dir, check_files)
    data = None
    if has_model:
        data = _data(sec.section("data", DATA.names), base_dir, check_files)
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
        metric=first[0] if first else OBJECTIVE["metric"].read(
            sec, default="value" if has_function else "val_loss"),
        direction=first[1] if first else OBJECTIVE["direction"].read(sec),
        isolate=OBJECTIVE["isolate"].read(sec),
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
    from mpiopt.refs import resolve_ref

    file, name = resolve_ref(value, base_dir, sec.source, sec.where(key))
    return f"{file}:{name}"


_VALIDATION = ("Separate validation files of the same format (else the training data is "
               "split, see `training.kfold`/`holdout`).")
DATA = Fields(
    Field("loader", None, "ref", "A function returning `(x, y)` or `(x_train, y_train, x_val, "
          "y_val)`.", shown="–"),
    Field("npz", [], "paths", "`.npz` files, globs allowed; each must match at least one file."),
    Field("npy", [], "paths", "Directories, each holding `<features>.npy` and `<labels>.npy` "
          "(one part of the data set each), globs allowed."),
    Field("hdf5", [], "paths", "HDF5 files, globs allowed."),
    Field("root", [], "paths", "ROOT files, globs allowed, read through uproot "
          "(`pip install 'mpiopt[uproot]'`): flat branches of `tree` as features, jagged ones "
          "as `collections`."),
    Field("tree", "Events", "text", "`root`: the TTree or RNTuple holding the branches "
          "(whichever the file holds)."),
    Field("features", "features", "text", "The array (npz, npy), dataset (HDF5) or branches "
          "(ROOT: a name or a list, one column each) of the inputs; with `collections`, the "
          "flat input `features`, none unless given.", shown="`features`"),
    Field("labels", "labels", "text", "The array, dataset or branch of the targets (numbers)."),
    Field("val_npz", [], "paths", _VALIDATION),
    Field("val_npy", [], "paths", _VALIDATION),
    Field("val_hdf5", [], "paths", _VALIDATION),
    Field("val_root", [], "paths", _VALIDATION),
    Field("in_memory", "auto", "text", "`true`: every rank reads the features into memory; "
          "`false`: they stay in their files and each rank reads only its samples of each "
          "batch, a thread reading ahead (memory-mapped where the format allows, one copy per "
          "node in the page cache); `auto`: in memory while the data take at most a quarter "
          "of one rank's memory (the node's, or its cgroup's, over the ranks on the node, "
          "within RLIMIT_AS/RLIMIT_DATA).", choices=("auto", "true", "false")),
    Field("shuffle", "auto", "text", "`exact`: a permutation of all training samples per "
          "epoch; `window`: windows of `shuffle_window` consecutive samples taken in a random "
          "order, shuffled inside (contiguous reads, for compressed HDF5 and ROOT files); "
          "`auto`: `window` when some training file is chunked or compressed (read by "
          "block), else `exact`, said in one line at the start. The same on every rank, in "
          "memory or streamed.", choices=("auto", "exact", "window")),
    Field("shuffle_window", 65536, "integer", "`shuffle: window`: samples per window.", low=1),
    Field("split_by", "auto", "text", "K-fold and holdout over samples, over whole files "
          "(`file`: the events of one file never sit on both sides), or `auto`: over whole "
          "chunks when some training file is chunked or compressed (read by block) and every "
          "fold gets at least 10 chunks (dealt at random, stratified by each chunk's most "
          "frequent class), so a fold decompresses only its own chunks; else over samples. "
          "Said in one line at the start; the same in memory or streamed.",
          choices=("auto", "sample", "file")),
    Field("cache", None, "text", "A node-local directory: each file is copied there once per "
          "node (the first rank copies, the others wait) and read from there.", shown="–"),
    Field("collections", None, "mapping", "`root`: per-object inputs (particles, tracks, jets) "
          "as `{NAME: {branches, length, ...}}` (`objective.data.collections` below): each "
          "jagged branch padded or cut to `length` objects, the model's input `NAME` with its "
          "mask `NAME_mask` (a Keras model's named inputs, a torch module's `forward` "
          "keyword arguments).", shown="–"),
    Field("weights", None, "text", "Event weights: the branch, dataset or array holding one "
          "number per event (negative ones allowed), used in the loss and in the validation "
          "metrics, scaled to a mean of 1.", shown="–"),
    Field("balance_classes", False, "flag", "Scale each class's weights (1 per event without "
          "`weights`) to the same total."),
    Field("selection", None, "text", "The events to train on: an expression over branches "
          "(datasets, arrays) of one number per event, such as `(jet_pt > 250) & "
          "(abs(jet_eta) < 2)`, applied before the splits.", shown="–"),
)
_FILES = ("npz", "npy", "hdf5", "root")


def _data(sec: _Section, base_dir: Path, check_files: bool) -> DataSpec:
    loader = _ref(sec, "loader", base_dir, check_files) if "loader" in sec.data else None
    files = {p + k: _paths(sec, p + k, base_dir, check_files, k == "npy")
             for p in ("", "val_") for k in _FILES}
    given = [k for k in _FILES if files[k]]
    if loader and given:
        sec.fail("loader", "give either a 'loader' or data files (npz/npy/hdf5/root), not both")
    if not loader and not given:
        sec.fail(None, "expected a 'loader' (file.py:name) or data files ('npz', 'npy', "
                       "'hdf5' or 'root')")
    if len(given) > 1:
        sec.fail(given[1], f"give one kind of data files, not both '{given[0]}' and '{given[1]}'")
    for k in _FILES:
        if files["val_" + k] and (loader or k not in given):
            sec.fail("val_" + k, "validation files go with training files of the same kind"
                     + ("; a loader returns its own split" if loader else ""))
    plain = {f.name: f.read(sec) for f in DATA if f.plain and f.name not in
             ("features", "in_memory", "cache", "weights", "balance_classes", "selection")}
    if plain["split_by"] == "file" and loader:
        sec.fail("split_by", "'file' needs data files; a loader's arrays have none")
    events = events_fields(sec, given, bool(loader))
    features = _features(sec, "root" in given, bool(events["collections"]))
    spec = DataSpec(loader=loader, **plain, **files, **events, features=features,
                    in_memory=_in_memory(sec), cache=_cache_dir(sec, base_dir))
    if check_files and given:
        _check_data(sec, spec)
    return spec


def _features(sec: _Section, root: bool, collections: bool = False):
    """The features' name (branch names for ROOT); with collections, none unless given."""
    if collections and "features" not in sec.data:
        return None
    value = sec.raw("features", "features")
    if isinstance(value, str) and value:
        return value
    if root and isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    sec.fail("features", f"expected a name{' or a list of branch names' if root else ''}, "
                         f"got {_show(value)}")


def _in_memory(sec: _Section):
    value = sec.raw("in_memory", "auto")
    if value in (True, False, "auto"):
        return value
    sec.fail("in_memory", f"expected auto, true or false, got {_show(value)}")


def _cache_dir(sec: _Section, base_dir: Path):
    value = sec.raw("cache", None)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        sec.fail("cache", f"expected a directory, got {_show(value)}")
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else base_dir / path)


def _check_data(sec: _Section, spec: DataSpec) -> None:
    """Open every data file's header now (datasets, branches, shapes, labels), so a bad
    file stops the study before any trial, with one line naming the file and the field."""
    from dataclasses import replace

    from mpiopt.errors import DataError
    from mpiopt.training.data import catalog

    for prefix in ("", "val_"):
        try:    # the files themselves: data.cache copies them when training needs them
            catalog(replace(spec, cache=None), prefix=prefix)
        except DataError as e:
            raise SpecError(f"{sec.source}: objective.data: {e}") from None


def _paths(sec: _Section, key: str, base_dir: Path, check_files: bool,
           directories: bool = False) -> list:
    """A path or list of paths (globs allowed), made absolute; each must match a file (a
    directory for npy)."""
    value = sec.raw(key, [])
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) and v for v in items):
        sec.fail(key, f"expected a path or a list of paths, got {_show(value)}")
    result = []
    for item in items:
        path = Path(item).expanduser()
        path = path if path.is_absolute() else base_dir / path
        if check_files and not [m for m in glob.glob(str(path))
                                if Path(m).is_dir() == directories]:
            what = "directory" if directories else "file"
            sec.fail(key, f"no {what} matches {shown(item)} (looked for {path})")
        result.append(str(path))
    return result


