"""How these files were written: by mpiopt at commit c5bce82 (the unversioned record
format, `{"op": <storage method>, "args", "kwargs", "db"}`), with
`python written_by.py tests/data/records-v0 /tmp/v0`. Kept for provenance: it needs that
release, and the tests only read what it wrote (tests/test_record_format.py)."""
import json, shutil, sys
from pathlib import Path
from mpiopt.storage import open_storage
from mpiopt.storage.resilient import Resilient, key_of
from mpiopt.kept import KeptResults, group_files
from mpiopt.trial import Result, TrialStatus
from mpiopt.errors import StorageUnavailable

out = Path(sys.argv[1]); work = Path(sys.argv[2])
shutil.rmtree(work, ignore_errors=True); work.mkdir(parents=True)
out.mkdir(parents=True, exist_ok=True)
url = f"sqlite:///{work / 'v0.db'}"
st = open_storage(url, create=True)
sid = st.create_study("v0", "minimize", "value", "study: {name: v0}", "0" * 64, "{}")
ts = st.create_trials(sid, [dict(params={"x": float(i)}, seed=i, group=i % 2) for i in range(8)])
ids = [t.id for t in ts]
print("trial ids", ids, "study", sid, "key", key_of(st))

class Down:
    """The storage during an outage: every write fails as transient."""
    shown_url = st.shown_url
    def __getattr__(self, name):
        def fail(*a, **k):
            raise StorageUnavailable("db: connection refused")
        return fail

place = out / "v0.mpiopt-recovery.jsonl"
place.unlink(missing_ok=True)
r = Resilient(Down(), 0.0, [place], say=lambda line: None, study_id=sid)
# the first failed write: written ahead (positional, as study_run.settle_unfinished calls it)
try:
    r.finish_trial(ids[0], TrialStatus.COMPLETE, value=1.5, value_std=0.25,
                   fold_values=[1.0, 2.0], metrics={"acc": 0.9}, duration=3.0,
                   intermediate={0: 2.0, 1: 1.5}, device="cpu")
except StorageUnavailable:
    pass
# after the give-up: journaled, as the scheduler calls them
r.add_intermediate(ids[1], 0, 4.0)
r.add_intermediate(ids[1], 1, 3.5)
r.finish_trials([dict(trial_id=ids[1], status=TrialStatus.PRUNED, value=3.5, duration=1.0),
                 dict(trial_id=ids[2], status=TrialStatus.FAILED, error="ValueError: bad x",
                      duration=0.5)], started=[ids[3]])
r.finish_and_create([dict(trial_id=ids[3], status=TrialStatus.COMPLETE, value=-2.0,
                          fold_values=[-1.0, -3.0], duration=2.0,
                          spans=[{"name": "train", "start": 0.0, "end": 1.5}])],
                    sid, [dict(params={"x": 9.0}, seed=9, group=0)])
r.interrupt_running(sid, keep={ids[7]})
# a leader's kept results
keeper = KeptResults([place], key_of(st), rank=1)
keeper.keep(Result(ids[4], TrialStatus.COMPLETE, value=0.125, fold_values=[0.1, 0.15],
                   metrics={"loss": 0.3}, duration=4.0, device="cpu"))
keeper.keep(Result(ids[5], TrialStatus.FAILED, error="RuntimeError: nan loss", duration=0.25))
[kept] = group_files(place, key_of(st))
print("kept file", kept)
# import them all into a copy of the database, and write the trials they make
from mpiopt.storage.resilient import import_recovery
shutil.copytree(kept.parent, work / kept.parent.name); shutil.copy(place, work / place.name)
n_kept = import_recovery(st, work / kept.parent.name / kept.name, sid)
n_rec = import_recovery(st, work / place.name, sid)
print("imported", n_kept, n_rec)
rows = []
for t in st.get_trials(sid):
    rows.append(dict(number=t.number, status=t.status.value, value=t.value, value_std=t.value_std,
                     fold_values=t.fold_values, metrics=t.metrics, error=t.error,
                     duration=t.duration, intermediate={str(k): v for k, v in sorted(t.intermediate.items())},
                     device=t.device, started=t.started_at is not None))
(out / "v0-trials.json").write_text(json.dumps(rows, indent=1) + "\n")
