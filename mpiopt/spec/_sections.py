"""`study`, `resources`, `objective` (with `data`, several objectives and constraints)."""
from __future__ import annotations

import glob
import math
from pathlib import Path


from mpiopt.errors import SpecError
from mpiopt.objectives import DIRECTIONS, parse_constraint
from mpiopt.objective_ref import check_ref
from mpiopt.spec._reader import _Section, _show
from mpiopt.spec._types import DataSpec, ObjectiveSpec, ResourcesSpec, SearchSpec, StudySpec

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


