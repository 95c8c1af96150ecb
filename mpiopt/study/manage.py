"""A person's commands on whole studies: delete, rename, copy, and enqueue a parameter set.

Why here and not in the CLI: the rules live in one place the CLI and Python share.

- A study whose job is running (its lease is fresh: mpiopt.run.study_run) is not deleted or
  renamed without `force`: the job would go on writing trials into a study that is gone
  or under another name. A job that died leaves a stale lease, which does not count.
- A copy carries every row of the study (trials, parameters, folds, per-epoch values,
  metrics, timestamps, statuses), into any database (a laptop's SQLite into the lab's
  PostgreSQL); it is refused onto an existing name, and the copy holds no lease.
- The name is also stored inside the spec (study.name), which `mpiopt resume` reads: a
  rename or a copy under another name rewrites it there too.
- An enqueued parameter set is checked against the study's stored space first: a wrong
  name or an out-of-range value is refused with one line and nothing is written.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone

import yaml

from mpiopt.errors import MpioptError, ResumeError, SpecError
from mpiopt.search import ALGORITHMS, traits
from mpiopt.spec import stored
from mpiopt.space import Space, SpaceError


def running_lease(record):
    """The lease of a live job running the study, or None."""
    lease = record.lease
    if lease is None or lease.is_stale(datetime.now(timezone.utc)):
        return None
    return lease


def refuse_running(record, force: bool, what: str) -> None:
    lease = running_lease(record)
    if lease is not None and not force:
        raise ResumeError(
            f"study '{record.name}' is being run by a job (host {lease.host}, pid {lease.pid}, "
            f"last heartbeat {lease.age_s(datetime.now(timezone.utc)):.0f}s ago): stop it "
            f"before you {what} the study, or add --force")


def delete_study(storage, name: str, force: bool = False) -> int:
    """Delete study `name` and all its trials; returns how many trials went."""
    record = storage.get_study(name)
    refuse_running(record, force, "delete")
    return storage.delete_study(record.id)


def rename_study(storage, old: str, new: str, force: bool = False) -> None:
    check_name(new)
    record = storage.get_study(old)
    refuse_running(record, force, "rename")
    storage.rename_study(record.id, new, renamed_spec(record.spec_text, new))


def copy_study(source, target, name: str, as_name: str | None = None) -> int:
    """Copy study `name` from storage `source` into storage `target` (as `as_name`);
    returns how many trials were copied."""
    new = as_name or name
    check_name(new)
    record = source.get_study(name)
    dump = source.dump_study(record.id)
    target.load_study_dump(dump, new, renamed_spec(record.spec_text, new))
    return len(dump["trials"])


def enqueue(storage, name: str, given: dict):
    """Queue one parameter set for study `name`; returns the PENDING trial. Refused for
    a pbt study: its rounds come from its population, and a queued set would run as a
    whole training outside it, which the searcher ignores."""
    record = storage.get_study(name)
    algorithm = stored(record.spec_text).get("search", "algorithm")
    if algorithm in ALGORITHMS and traits(algorithm).rounds:
        raise SpecError(f"study '{name}' uses search.algorithm pbt: its rounds come from its "
                        "population, so a queued parameter set has no member to join")
    try:
        params = Space.from_dict(json.loads(record.space_json)).parameter_set(given)
    except SpaceError as exc:
        raise SpecError(f"study '{name}': --set {exc.field}: {exc.message}") from None
    return storage.enqueue_trials(record.id, [params])[0]


def renamed_spec(spec_text: str, new: str) -> str:
    """The stored spec with study.name set to `new` (what `mpiopt resume NEW` reads)."""
    data = stored(spec_text).data
    if isinstance(data.get("study"), dict):
        data["study"]["name"] = new
    return yaml.safe_dump(data, sort_keys=False)


def check_name(name: str) -> None:
    from mpiopt.names import name_problem

    problem = name_problem(name)
    if problem:
        raise MpioptError(f"invalid study name {name!r}: it {problem}")
