"""The resolved spec as plain dicts: stored with a study, fingerprinted, shown."""
from __future__ import annotations



from mpiopt.spec._types import ObjectiveSpec, SearchSpec, TrainingSpec

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


# Data fields whose default changed after specs were stored without them: the value
# their absence meant then. Such a field is written (stored, fingerprinted) unless it
# holds that value, so a stored spec without it still reads as it ran
# (stored_as_it_ran), and a study created since stores its value.
STORED_DEFAULTS = {"shuffle": "exact", "split_by": "sample"}


def _data_beyond_first_release(d) -> dict:
    """The data fields added since the first release, only where they differ from their
    defaults (STORED_DEFAULTS where the default changed): a study that does not use them
    keeps its fingerprint."""
    from dataclasses import fields

    from mpiopt.spec._types import DataSpec

    first = {"loader", "npz", "hdf5", "features", "labels", "val_npz", "val_hdf5"}
    out = {}
    for f in fields(DataSpec):
        value = getattr(d, f.name)
        default = STORED_DEFAULTS.get(f.name, DataSpec.__dataclass_fields__[f.name].default)
        if f.name not in first and value != default and value not in ([], None):
            out[f.name] = list(value) if isinstance(value, (list, tuple)) else value
    if isinstance(d.features, tuple):
        out["features"] = list(d.features)
    if d.collections:
        out["collections"] = {c.name: c.to_dict() for c in d.collections}
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
        out["data"].update(_data_beyond_first_release(d))
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
    if s.max_failures_in_a_row != 10:   # (absent at its default, as above)
        out["max_failures_in_a_row"] = s.max_failures_in_a_row
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
    for name in ("loss", "optimizer", "lr_scheduler"):    # (absent when unused, as above)
        if getattr(t, name):
            out[name] = dict(getattr(t, name))
    if t.metrics:
        out["metrics"] = list(t.metrics)
    return out


def stored_as_it_ran(stored: dict) -> dict:
    """A spec dict read back from a study, with the values that fields absent from it
    (STORED_DEFAULTS) meant when it was stored: a study created before a default changed
    resumes as it ran, with the same fingerprint."""
    data = (stored.get("objective") or {}).get("data")
    if isinstance(data, dict):
        for key, value in STORED_DEFAULTS.items():
            data.setdefault(key, value)
    return stored
