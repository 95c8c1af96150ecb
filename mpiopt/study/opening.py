"""Create or resume a study record before any trial runs (rank 0 only).

All refusals happen here, before a single trial is written: an existing study without
--resume, a resumed study whose spec changed in more than its budget, an unknown study.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from mpiopt import jsontext
from mpiopt.errors import DuplicateStudyError, ResumeError, UnknownStudyError
from mpiopt.knobs import NATIVE_LOG
from mpiopt.names import file_stem
from mpiopt.trial import FrozenTrial, StudyStatus

# Keys that may change when a study is resumed: they decide how long it runs, not what
# a trial means. Everything else must match the stored spec.
RESUMABLE_CHANGES = (
    "storage", "study.description", "search.trials", "search.time_limit", "search.target",
    "search.max_initial_failures", "search.max_failures_in_a_row", "resources.group_size", "search.trial_timeout",
    "search.grace", "search.max_attempts", "objective.isolate",
    # queued once, when the study is created (later sets: `mpiopt enqueue`); told anew on
    # every run (another study's results, a hint to the searcher only)
    "search.initial_trials", "search.warm_start",
    # what is kept of training, not what a trial means (mpiopt.artifacts)
    "search.keep_models", "training.checkpoint_every", "training.refit",
)


@dataclass
class OpenedStudy:
    storage: object
    study_id: int
    existing: list[FrozenTrial]
    resumed: bool
    job: object = None        # this job's row (storage Job, with its token), once joined


def spec_text(spec) -> str:
    """The spec as stored with the study; a storage URL keeps no password."""
    from mpiopt.storage import mask_url

    data = spec.to_dict()
    storage = data.get("storage")
    if isinstance(storage, str):
        data["storage"] = mask_url(storage)
    elif isinstance(storage, dict) and storage.get("url"):   # retry_timeout or artifacts set
        storage["url"] = mask_url(storage["url"])
    return yaml.safe_dump(data, sort_keys=False)


NATIVE_LOG_ENV = NATIVE_LOG.env


def native_log_path(url: str, name: str) -> Path:
    """The study's log: what native libraries (TensorFlow's C++ start-up lines, absl)
    write to stderr goes here instead of the terminal. Beside a SQLite file, else in the
    current directory (a cluster job's submission directory)."""
    from mpiopt.storage import StorageURL

    path = StorageURL.parse(url).sqlite_path
    return (path.parent if path is not None else Path.cwd()) / f"{file_stem(name)}.log"


def stored_spec_dict(storage, name: str) -> dict:
    """The stored spec of study `name`, as a mapping a resume's overrides change."""
    from mpiopt.spec import stored

    return stored(storage.get_study(name).spec_text).data


def open_study(storage, spec, resume, url: str, take_lease=None) -> OpenedStudy:
    """The study to run, created or resumed. `take_lease(study_id) -> Job` runs before
    anything of a resumed study changes, so a study another job runs is left untouched.
    `resume`: False (a new study), True (it must exist) or "auto" (`--resume-or-start`:
    resume it if it exists, else start it; a batch job that is requeued runs one command)."""
    name = spec.study.name
    take_lease = take_lease or (lambda study_id: None)
    try:
        record = storage.get_study(name)
    except UnknownStudyError:
        record = None
    if record is None and resume is True:
        known = [r.name for r in storage.list_studies()]
        raise UnknownStudyError(
            f"--resume: there is no study '{name}' in {storage.shown_url} to resume ("
            + (f"it holds: {', '.join(known)}" if known else "it holds no studies")
            + "); start it with `mpiopt search` without --resume")
    if record is None:
        try:
            study_id = storage.create_study(
                name, spec.objective.direction, spec.objective.metric, spec_text(spec),
                spec.fingerprint(), jsontext.exact(spec.space.to_dict()),
                enqueued=list(getattr(spec.search, "initial_trials", ())))
            return OpenedStudy(storage, study_id, [], False, take_lease(study_id))
        except DuplicateStudyError:
            if resume != "auto":
                raise
            # another job started it since the look above (jobs of an array, all with
            # --resume-or-start): resumed as it asked, so the lease decides who runs it
            record = storage.get_study(name)
    if not resume:
        raise ResumeError(
            f"study '{name}' already exists in {url}: continue it with `mpiopt search SPEC "
            f"--resume` or `mpiopt resume {name}`, or give study.name a new name")
    from mpiopt.spec import stored

    changes = spec_changes(stored(record.spec_text).data, spec)
    if changes:
        raise ResumeError(f"study '{name}' was started with a different spec; only "
                          f"{', '.join(RESUMABLE_CHANGES)} may change on resume: " + "; ".join(changes))
    job = take_lease(record.id)
    storage.update_study_spec(record.id, spec_text(spec))
    storage.set_study_status(record.id, StudyStatus.RUNNING)
    return OpenedStudy(storage, record.id, storage.get_trials(record.id), True, job)


def spec_changes(stored: dict, spec) -> list[str]:
    """How spec differs from the stored one in what a resume must keep.

    The space and objective compare by fingerprint (file names, not absolute paths, so a
    moved checkout can resume); the other sections compare field by field."""
    from mpiopt.spec import Spec

    old_spec = Spec.from_dict(stored, source="<stored>", check_files=False)
    out = old_spec.diff(spec) if old_spec.fingerprint() != spec.fingerprint() else []
    for section in ("search", "training"):
        out += _dict_changes({section: stored.get(section)}, {section: spec.to_dict()[section]})
    return out


def _dict_changes(old: dict, new: dict) -> list[str]:
    """Dotted paths whose values differ, other than the resumable ones."""
    out = []
    old, new = _flatten(old), _flatten(new)
    for path in sorted(set(old) | set(new)):
        if any(path == key or path.startswith(key + ".") for key in RESUMABLE_CHANGES):
            continue
        a, b = old.get(path, "<absent>"), new.get(path, "<absent>")
        if a != b:
            out.append(f"{path}: {a!r} -> {b!r}")
    return out


def _flatten(d, prefix: str = "") -> dict:
    flat = {}
    for key, value in (d or {}).items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, path + "."))
        else:
            flat[path] = value
    return flat
