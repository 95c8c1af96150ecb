"""Study management and the queue, without MPI: the commands through subprocess (copy into
a real PostgreSQL server), the Python API and the spec fields. The storage methods behind
them are in the conformance suite (test_storage.py); tests/test_queue_mpi.py runs the
queue under mpiexec."""
from __future__ import annotations

import json
import subprocess
from datetime import timedelta

import pytest
import yaml

from conftest import mpiopt
from test_storage import fill_study as fill, row_counts  # every kind of row
from mpiopt.errors import MpioptError, SpecError
from mpiopt.storage import open_storage
from mpiopt.trial import TrialStatus

SPACE = {"x": {"type": "real", "low": -5.0, "high": 10.0},
         "k": {"type": "integer", "low": 1, "high": 4},
         "act": {"type": "categorical", "choices": ["relu", "tanh"]}}
SPEC = yaml.safe_dump({"study": {"name": "s"}, "search": {"algorithm": "random", "trials": 10},
                       "search_space": SPACE})


def new_study(st, name="s") -> int:
    return st.create_study(name, "minimize", "value", SPEC.replace("name: s", f"name: {name}"),
                           "ab" * 32, json.dumps(SPACE))


# ---- the commands ----------------------------------------------------------------------
def sqlite_url(tmp_path, name="r.db"):
    return f"sqlite:///{tmp_path / name}"


def test_copy_from_sqlite_to_postgresql_keeps_every_field(tmp_path, pg_server):
    src, dst = sqlite_url(tmp_path), pg_server.new_database()
    kept = str(tmp_path / "lab.mpiopt-recovery.jsonl")
    with open_storage(src, create=True) as st:
        fill(st, new_study(st, "lab"))
        st.set_study_recovery(st.get_study("lab").id, [kept])
    copied = mpiopt("study", "copy", "lab", "--storage", src, "--to", dst, "--as", "lab2",
                    cwd=tmp_path, check=True)
    assert "copied study 'lab' (4 trials)" in copied.stdout
    for command in (("trials", "--format", "json"), ("export", "--format", "json")):
        a = mpiopt(*command[:1], "lab", *command[1:], "--storage", src, check=True).stdout
        b = mpiopt(*command[:1], "lab2", *command[1:], "--storage", dst, check=True).stdout
        assert json.loads(a) == json.loads(b) and len(json.loads(a)) == 4
    with open_storage(src) as a, open_storage(dst) as b:
        da, db = (s.dump_study(s.get_study(n).id) for s, n in ((a, "lab"), (b, "lab2")))
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("id", "trial_id")}  # noqa: E731
                          for r in rows]
    assert strip(da["children"]["trial_folds"]) == strip(db["children"]["trial_folds"])
    assert yaml.safe_load(db["study"]["spec_text"])["study"]["name"] == "lab2"
    # the original's recovery file names its trial ids: never the copy's to import
    assert da["study"]["recovery"] == json.dumps([kept]) and db["study"]["recovery"] is None
    again = mpiopt("study", "copy", "lab", "--storage", src, "--to", dst, "--as", "lab2")
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "already exists" in again.stderr


def _hold_lease(url, name, age_s=0.0):
    """Hold the study's lease as a live job elsewhere would (its last beat `age_s` ago)."""
    from mpiopt.storage.models import JobModel

    with open_storage(url) as st:
        sid = st.get_study(name).id
        held = st.get_study(name).lease
        if held is None or not held.live:
            st.join_study(sid, "n99", 4242, 30)
        if age_s:
            lease = st.get_study(name).lease
            beat = lease.beat_at.replace(tzinfo=None) - timedelta(seconds=age_s)
            with st.engine.begin() as conn:
                conn.execute(JobModel.__table__.update().where(JobModel.id == lease.id)
                             .values(beat_at=beat))


def test_delete_and_rename_refuse_a_running_study_unless_forced(tmp_path):
    url = sqlite_url(tmp_path)
    with open_storage(url, create=True) as st:
        fill(st, new_study(st, "s"))
    _hold_lease(url, "s")
    for args in (("delete", "s", "--yes"), ("rename", "s", "t")):
        out = mpiopt("study", *args, "--storage", url, cwd=tmp_path)
        assert out.returncode == 2 and "being run by a job (host n99, pid 4242" in out.stderr
    assert row_counts(url)["trials"] == 4
    no_yes = mpiopt("study", "delete", "s", "--storage", url, "--force", stdin=subprocess.DEVNULL)
    assert no_yes.returncode == 2 and "without --yes" in no_yes.stderr
    mpiopt("study", "rename", "s", "t", "--storage", url, "--force", check=True)
    _hold_lease(url, "t", age_s=600)          # a job that died: its stale lease does not count
    out = mpiopt("study", "delete", "t", "--yes", "--storage", url, check=True)
    assert out.stdout.strip() == "deleted study 't' (4 trials)"
    assert row_counts(url)["trials"] == 0


def test_a_study_named_before_names_were_checked_is_renamed_then_resumed(tmp_path):
    url = sqlite_url(tmp_path)
    with open_storage(url, create=True) as st:
        new_study(st, "my study")             # as an older mpiopt let it be created
    refused = mpiopt("resume", "my study", "--storage", url, cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert f"rename this one first: mpiopt study rename 'my study' NEW --storage {url}" in refused.stderr
    bad = mpiopt("study", "rename", "my study", "a/b", "--storage", url)
    assert bad.returncode == 2 and "letters, digits" in bad.stderr
    mpiopt("study", "rename", "my study", "my_study", "--storage", url, check=True)
    with open_storage(url) as st:
        assert [s.name for s in st.list_studies()] == ["my_study"]


def test_enqueue_checks_the_space_and_writes_nothing_when_wrong(tmp_path):
    url = sqlite_url(tmp_path)
    with open_storage(url, create=True) as st:
        new_study(st, "s")
    env_url = {"MPIOPT_STORAGE": url}      # the environment's URL, as every command takes it
    from conftest import subprocess_env

    env = {**subprocess_env(), **env_url}
    for sets, message in [(("x=11", "k=1", "act=relu"), "--set x: 11 is outside [-5.0, 10.0]"),
                          (("x=1", "k=1", "act=elu"), "--set act:"),
                          (("x=1", "k=1", "act=relu", "lr=3"), "--set lr: not a parameter"),
                          (("x=1", "k=1"), "--set act: missing"),
                          (("x",), "expected NAME=VALUE")]:
        out = mpiopt("enqueue", "s", *[a for s in sets for a in ("--set", s)], env=env)
        assert out.returncode == 2 and message in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert row_counts(url)["trials"] == 0
    ok = mpiopt("enqueue", "s", "--set", "x=2", "--set", "k=3", "--set", "act=tanh", env=env,
                check=True)
    assert "queued as trial 0 of 's' (PENDING): no job runs the study now" in ok.stdout
    with open_storage(url) as st:
        assert st.pending_trials(st.get_study("s").id)[0].params == {"x": 2.0, "k": 3, "act": "tanh"}


def test_version_and_storage_precedence(tmp_path):
    from conftest import subprocess_env

    from mpiopt import __version__

    assert mpiopt("--version", check=True).stdout.strip() == f"mpiopt {__version__}"
    with open_storage(sqlite_url(tmp_path, "env.db"), create=True) as st:
        new_study(st, "from_env")
    env = {**subprocess_env(), "MPIOPT_STORAGE": sqlite_url(tmp_path, "env.db")}
    listed = mpiopt("studies", "--format", "json", env=env, check=True).stdout
    assert [s["name"] for s in json.loads(listed)] == ["from_env"]
    flag = mpiopt("studies", "--storage", sqlite_url(tmp_path, "none.db"), env=env)
    assert flag.returncode == 2 and "none.db" in flag.stderr      # the flag wins


# ---- the Python API and the spec -------------------------------------------------------
def test_trials_dataframe_best_params_and_value(tmp_path, monkeypatch):
    import mpiopt as api

    url = sqlite_url(tmp_path)
    with open_storage(url, create=True) as st:
        sid = new_study(st, "s")
        fill(st, sid)
    monkeypatch.setenv("MPIOPT_STORAGE", url)
    with api.load_study("s") as study:
        frame = study.trials_dataframe()
        assert list(frame["params_x"]) == [1.5, -4.0, 3.0, 0.0]
        assert list(frame["params_act"]) == ["relu", "tanh", "relu", "tanh"]
        assert frame["user_attrs_acc"][0] == 0.75    # Optuna's names (docs/optuna-migration.md)
        assert str(frame["datetime_start"].dtype).startswith("datetime64")
        assert study.best_params == {"x": 1.5, "k": 2, "act": "relu"} and study.best_value == 0.5
    with open_storage(url) as st:
        new_study(st, "empty")
    with api.load_study("empty") as empty, pytest.raises(MpioptError, match="no complete trial"):
        empty.best_value


def test_initial_trials_errors_name_the_entry_and_field(tmp_path):
    from mpiopt.spec import load_spec

    base = {"study": {"name": "s"}, "search_space": SPACE,
            "objective": {"function": f"{tmp_path / 'f.py'}:f"},
            "search": {"algorithm": "random", "trials": 3}}
    (tmp_path / "f.py").write_text("def f(p):\n    return 0.0\n")
    for entries, message in [
            ([{"x": 1, "k": 1, "act": "relu"}, {"x": 1, "k": 9, "act": "relu"}],
             "search.initial_trials[1].k: 9 is outside [1, 4]"),
            ([{"x": 1, "k": 1, "act": "relu", "y": 2}], "search.initial_trials[0].y: not a parameter"),
            ([{"x": 1, "k": 1}], "search.initial_trials[0].act: missing"),
            ([3], "search.initial_trials[0]: expected a mapping"),
            ({"x": 1}, "search.initial_trials: expected a list")]:
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump({**base, "search": {**base["search"], "initial_trials": entries}}))
        with pytest.raises(SpecError, match="^" + str(path).replace(".", r"\.") + ": ") as exc:
            load_spec(path)
        assert message in str(exc.value)
    path.write_text(yaml.safe_dump({**base, "search": {**base["search"],
                                                      "initial_trials": [{"x": 1, "k": 2, "act": "tanh"}]}}))
    spec = load_spec(path)
    assert spec.search.initial_trials == ({"x": 1.0, "k": 2, "act": "tanh"},)
    from mpiopt.spec import Spec

    assert Spec.from_dict(spec.to_dict()).search.initial_trials == spec.search.initial_trials


def test_warm_start_tells_what_fits_and_refuses_another_metric(tmp_path):
    from mpiopt.spec import Spec
    from mpiopt.study.warm_start import warm_results

    url = sqlite_url(tmp_path)
    with open_storage(url, create=True) as st:
        sid = new_study(st, "old")
        for x, status in [(1.0, TrialStatus.COMPLETE), (9.0, TrialStatus.COMPLETE),
                          (2.0, TrialStatus.FAILED), (3.0, TrialStatus.PRUNED)]:
            t = st.create_trial(sid, {"x": x, "k": 2, "act": "relu"}, seed=1, group=0)
            st.finish_trial(t.id, status, value=None if status is TrialStatus.FAILED else x * 10)
        narrow = {"x": {"type": "real", "low": 0.0, "high": 5.0},
                  "k": {"type": "integer", "low": 1, "high": 4}}
        spec = Spec.from_dict({"study": {"name": "new"}, "search_space": narrow,
                               "objective": {"function": f"{tmp_path / 'f.py'}:f"},
                               "search": {"trials": 3, "warm_start": "old"}}, check_files=False)
        told, line = warm_results(st, spec)
        assert told == [({"x": 1.0, "k": 2}, 10.0), ({"x": 3.0, "k": 2}, 30.0)]
        assert line == ("warm start from study 'old': 2 result(s) told, 1 skipped (parameters "
                        "outside this space, or no usable value)")
        other = Spec.from_dict({**spec.to_dict(), "objective": {
            "function": f"{tmp_path / 'f.py'}:f", "direction": "maximize"}}, check_files=False)
        with pytest.raises(MpioptError, match="minimizes value, this one maximizes value"):
            warm_results(st, other)
