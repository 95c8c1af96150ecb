"""The recovery and kept-result files' record format (mpiopt/kept.py): files that
today's release wrote (tests/data/records-v0, unversioned lines naming storage methods)
still import to the same trials, the versioned lines written now import to the same
trials too, and a line this mpiopt cannot read stops the import before anything is
written, naming the file and line."""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from mpiopt.errors import StorageError, StorageUnavailable
from mpiopt.storage import BaseStorage, open_storage
from mpiopt.storage.recovery import import_recovery
from mpiopt.storage.resilient import Resilient
from mpiopt.kept import (FINISH_FIELDS, FORMAT_VERSION, KINDS, KeptResults,
                               group_files, read_line)
from mpiopt.trial import Result, TrialStatus

V0 = Path(__file__).parent / "data" / "records-v0"
V0_KEY = "7733cc3375f4"          # the key of the database written_by.py wrote them for


def study_as_written(url):
    """The database written_by.py started from: study v0 with eight RUNNING trials."""
    st = open_storage(url, create=True)
    sid = st.create_study("v0", "minimize", "value", "study: {name: v0}", "0" * 64, "{}")
    ids = [t.id for t in st.create_trials(
        sid, [dict(params={"x": float(i)}, seed=i, group=i % 2) for i in range(8)])]
    assert ids == list(range(1, 9))          # (the ids the files name)
    return st, sid, ids


def trial_rows(st, sid) -> list[dict]:
    return [dict(number=t.number, status=t.status.value, value=t.value, value_std=t.value_std,
                 fold_values=t.fold_values, metrics=t.metrics, error=t.error,
                 duration=t.duration,
                 intermediate={str(k.epoch) if not k.fold else f"{k.fold}/{k.epoch}": v
                               for k, v in t.intermediate.items()},
                 device=t.device, started=t.started_at is not None)
            for t in st.get_trials(sid)]


def import_both(st, sid, recovery: Path, kept: Path) -> int:
    """As a resume does: the leaders' kept files first, then the recovery file."""
    return import_recovery(st, kept, sid) + import_recovery(st, recovery, sid)


def test_files_written_by_the_unversioned_release_import_to_the_same_trials(tmp_path, db_url):
    st, sid, _ = study_as_written(db_url)
    with st:
        key = st.location.key
        recovery = tmp_path / "v0.mpiopt-recovery.jsonl"
        recovery.write_text((V0 / recovery.name).read_text().replace(V0_KEY, key))
        [old_kept] = (V0 / "v0.mpiopt-kept").iterdir()
        kept = tmp_path / "v0.mpiopt-kept" / f"{key}.rank1.jsonl"
        kept.parent.mkdir()
        kept.write_text(old_kept.read_text().replace(V0_KEY, key))
        assert import_both(st, sid, recovery, kept) == 9
        assert not recovery.exists() and not kept.exists()
        assert trial_rows(st, sid) == json.loads((V0 / "v0-trials.json").read_text())


class Down(BaseStorage):
    """The storage during an outage: every call fails as transient."""

    def __init__(self, url):
        super().__init__(url)


def _down(*args, **kwargs):
    raise StorageUnavailable("db: connection refused")


for _name in BaseStorage.__abstractmethods__:
    setattr(Down, _name, _down)
Down.__abstractmethods__ = frozenset()


def test_the_same_writes_in_todays_format_import_to_the_same_trials(tmp_path, db_url):
    """written_by.py's writes, made now: versioned lines, the same trials on import."""
    st, sid, ids = study_as_written(db_url)
    with st:
        place = tmp_path / "v0.mpiopt-recovery.jsonl"
        r = Resilient(Down(st.url), 0.0, [place], say=lambda line: None, study_id=sid)
        with pytest.raises(StorageUnavailable):
            r.finish_trial(ids[0], TrialStatus.COMPLETE, value=1.5, value_std=0.25,
                           fold_values=[1.0, 2.0], metrics={"acc": 0.9}, duration=3.0,
                           intermediate={0: 2.0, 1: 1.5}, device="cpu")
        r.add_intermediate(ids[1], 0, 4.0)
        r.add_intermediate(ids[1], 1, 3.5)
        r.finish_trials([dict(trial_id=ids[1], status=TrialStatus.PRUNED, value=3.5, duration=1.0),
                         dict(trial_id=ids[2], status=TrialStatus.FAILED,
                              error="ValueError: bad x", duration=0.5)], started=[ids[3]])
        r.finish_and_create([dict(trial_id=ids[3], status=TrialStatus.COMPLETE, value=-2.0,
                                  fold_values=[-1.0, -3.0], duration=2.0,
                                  spans=[{"name": "train", "start": 0.0, "end": 1.5}])],
                            sid, [dict(params={"x": 9.0}, seed=9, group=0)])
        r.interrupt_running(sid, keep={ids[7]})
        keeper = KeptResults([place], st.location.key, rank=1)
        keeper.keep(Result(ids[4], TrialStatus.COMPLETE, value=0.125, fold_values=[0.1, 0.15],
                           metrics={"loss": 0.3}, duration=4.0, device="cpu"))
        keeper.keep(Result(ids[5], TrialStatus.FAILED, error="RuntimeError: nan loss",
                           duration=0.25))
        [kept] = group_files(place, st.location.key)
        for path in (place, kept):
            for line in path.read_text().splitlines():
                entry = json.loads(line)
                assert entry["v"] == FORMAT_VERSION and entry["kind"] in KINDS
                assert entry["db"] == st.location.key and "op" not in entry
        assert import_both(st, sid, place, kept) == 9
        assert trial_rows(st, sid) == json.loads((V0 / "v0-trials.json").read_text())


def test_a_line_of_a_newer_format_stops_the_import_before_anything_is_written(tmp_path):
    st, sid, ids = study_as_written(f"sqlite:///{tmp_path / 'r.db'}")
    with st:
        path = tmp_path / "s.mpiopt-recovery.jsonl"
        good = {"v": 1, "kind": "finish", "trial_id": ids[0], "status": "COMPLETE", "value": 1.0}
        newer = {"v": FORMAT_VERSION + 1, "kind": "finish", "trial_id": ids[1]}
        unknown = {"v": 1, "kind": "teleport", "trial_id": ids[1]}
        for bad in (newer, unknown):
            path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
            with pytest.raises(StorageError, match=f"{path}:2: a record of format version"):
                import_recovery(st, path, sid)
            assert path.read_text().count("\n") == 2            # kept, whole
            assert st.get_trial_by_id(ids[0]).status is TrialStatus.RUNNING


def test_a_finish_record_has_every_field_finish_trial_takes():
    """A field added to finish_trial must be added to the record, or a result kept in a
    file would lose it on import."""
    params = list(inspect.signature(BaseStorage.finish_trial).parameters)[1:]
    assert list(FINISH_FIELDS) == params
    assert set(Result(1, TrialStatus.COMPLETE).record()) <= set(FINISH_FIELDS)


def test_a_folds_value_kept_in_a_file_comes_back_under_its_fold(tmp_path):
    """Issue 62: a per-epoch value written to the recovery file during an outage keeps its
    fold (and a finish's per-epoch values theirs); a record without one is fold 0's."""
    st, sid, ids = study_as_written(f"sqlite:///{tmp_path / 'r.db'}")
    with st:
        place = tmp_path / "f.mpiopt-recovery.jsonl"
        r = Resilient(Down(st.url), 0.0, [place], say=lambda line: None, study_id=sid)
        with pytest.raises(StorageUnavailable):
            r.finish_trial(ids[1], TrialStatus.PRUNED, value=0.5, duration=1.0,
                           intermediate={(0, 1): 0.5, (2, 1): 0.25})
        r.add_intermediate(ids[0], 2, 0.75, fold=1)
        with place.open("a") as f:
            f.write(json.dumps({"v": 1, "kind": "intermediate", "trial_id": ids[0],
                                "epoch": 1, "value": 0.5}) + "\n")
        assert import_recovery(st, place, sid) == 3
        assert st.get_trial_by_id(ids[0]).intermediate == {(0, 1): 0.5, (1, 2): 0.75}
        assert st.get_trial_by_id(ids[1]).intermediate == {(0, 1): 0.5, (2, 1): 0.25}


def test_cut_and_empty_lines_are_skipped_and_v0_positional_arguments_are_named():
    assert read_line("") is None and read_line('{"v": 1, "kind": "fin') is None
    assert read_line(json.dumps({"op": "add_intermediate", "args": [3, 2, 0.5],
                                 "kwargs": {}})) == {"kind": "intermediate", "trial_id": 3,
                                                     "epoch": 2, "value": 0.5}
    assert read_line(json.dumps({"op": "interrupt_running", "args": [1],
                                 "kwargs": {"keep": [4]}, "db": "k"})) == \
        {"kind": "interrupt", "db": "k", "study_id": 1, "keep": [4]}
