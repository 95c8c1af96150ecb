"""A real kill -9 of an mpiexec job mid-trial, then --resume: the trial continues from its
checkpoints and ends with the value of an uninterrupted run (allreduce, the same seed,
two folds side by side on a group of two ranks). Finished trials' checkpoints go; the
best trial's model is kept, and training.refit's model is made on one group at the end.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import yaml

from conftest import BIN, mpiopt, resume_with, subprocess_env
from test_chaos import _kill
from mpiopt.trial import TrialStatus

pytest.importorskip("tensorflow")

from test_training import write_case  # noqa: E402

EPOCHS = 30

def _case(tmp_path):
    path = write_case(tmp_path, training={"epochs": EPOCHS, "batch_size": 8, "kfold": 2,
                                          "refit": True})
    spec = yaml.safe_load(path.read_text())
    spec["objective"]["model"] = "tiny.py:build_paced"    # paced in the job that is killed
    spec["search"] = {"algorithm": "random", "trials": 1, "seed": 3}
    spec["resources"] = {"group_size": 2}
    path.write_text(yaml.safe_dump(spec))
    return path


def _trial(url):
    from mpiopt.storage import open_storage

    with open_storage(url) as st:
        return st.get_trials(st.get_study("tiny").id)


def _epoch(store, fold):
    from mpiopt.artifacts import checkpoint

    ckpt = checkpoint.load(store / "checkpoints" / "trial-0" / f"fold-{fold}.npz")
    return -1 if ckpt is None else ckpt["meta"]["epoch"]


def test_kill_9_mid_trial_then_resume_gives_the_uninterrupted_value(tmp_path):
    spec = _case(tmp_path)
    plain = f"sqlite:///{tmp_path / 'plain.db'}"
    proc = mpiopt("search", spec, "--storage", plain, np=3, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [expected] = _trial(plain)
    kept = tmp_path / "plain-artifacts" / "tiny"
    assert (kept / "models" / "trial-0.keras").is_file()
    assert (kept / "refit.keras").is_file()            # training.refit, on one group
    assert not (kept / "checkpoints" / "trial-0").exists()

    url = f"sqlite:///{tmp_path / 'killed.db'}"
    store = tmp_path / "killed-artifacts" / "tiny"
    job = subprocess.Popen([str(BIN / "mpiexec"), "-n", "3", str(BIN / "mpiopt"), "search",
                            str(spec), "--storage", url], cwd=tmp_path,
                           env=dict(subprocess_env(), PACED="1"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    end, seen = time.monotonic() + 120, []
    while min(_epoch(store, 0), _epoch(store, 1)) < 3:
        seen.append((_epoch(store, 0), _epoch(store, 1)))
        assert job.poll() is None, f"the job ended before the kill (epochs seen {seen[-40:]})"
        assert time.monotonic() < end, "no checkpoint was written"
        time.sleep(0.05)
    _kill(job, "job")
    job.communicate(timeout=30)
    at_kill = min(_epoch(store, 0), _epoch(store, 1))
    assert at_kill < EPOCHS
    [killed] = _trial(url)
    assert killed.status is TrialStatus.RUNNING

    proc = mpiopt("search", spec, "--storage", url, "--resume", np=3, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [resumed] = _trial(url)
    assert resumed.status is TrialStatus.COMPLETE
    assert resumed.value == pytest.approx(expected.value, abs=1e-6)
    marks = [s for s in resumed.spans if s["kind"] == "resume"]
    assert sorted(s["fold"] for s in marks) == [0, 1]
    assert all(s["epoch"] >= at_kill for s in marks)       # continued, not started again
    # ... and says so, where and from which epoch of which fold (issue 62)
    said = ("resumed from its checkpoints at " + ", ".join(
        f"epoch {s['epoch']} of fold {s['fold']}" for s in sorted(marks, key=lambda s: s["fold"])))
    assert f"    {said}\n" in proc.stdout, proc.stdout
    shown = mpiopt("show", "tiny", "0", "--storage", url, cwd=tmp_path, check=True).stdout
    assert f"  {said}\n" in shown, shown
    assert list(resumed.intermediate) == [(f, e) for f in (0, 1) for e in range(1, EPOCHS + 1)]
    assert not (store / "checkpoints" / "trial-0").exists()
    assert (store / "models" / "trial-0.keras").is_file()
    assert (store / "refit.keras").is_file()


def test_an_artifact_store_that_fails_mid_study_under_mpiexec_ends_in_order(tmp_path):
    """A file where the checkpoints folder should be (as a full disk): both ranks of the
    group stop at the same epoch, the job ends with one line, the resume command and
    status 1 (no rank killed, no MPI_Abort), the trial INTERRUPTED, not a lost attempt."""
    path = write_case(tmp_path, training={"epochs": 2})
    spec = yaml.safe_load(path.read_text())
    spec["resources"] = {"group_size": 2}
    path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'f.db'}"
    store = tmp_path / "f-artifacts" / "tiny"
    store.mkdir(parents=True)
    (store / "checkpoints").write_text("in the way")
    proc = mpiopt("search", path, "--storage", url, np=3, cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("mpiopt:")]
    assert len(lines) == 1 and "storage.artifacts: cannot write" in lines[0], proc.stderr
    assert lines[0].endswith(f"resume with: {resume_with(3)} tiny --storage {url}")
    assert "BAD TERMINATION" not in proc.stdout + proc.stderr
    [trial] = _trial(url)
    assert trial.status is TrialStatus.INTERRUPTED and "cannot write" in trial.error
