"""npz and HDF5 studies under mpiexec, interrupted and resumed.

The data forms most of our users keep their data in: the resolved spec that rank 0 sends
to every rank must load back there (a `loader: null` once hung the job), and the spec
stored with the study must resume it. A tiny Keras model on generated data, 3 ranks
(coordinator + 2 groups), SIGINT once a trial is finished, then `mpiopt resume`.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import BIN, mpiopt, resume_with, study_state, subprocess_env  # noqa: E402
from test_training import MODEL_SOURCE  # noqa: E402

pytest.importorskip("tensorflow")

# Trials of about half a second on 2 groups, a second more where the job is paced (the
# one interrupted): the SIGINT, sent within 0.3 s of the first trial's end, must land with
# most of the study still to run however late a loaded machine lets the test see it.
BUDGET = 8


def write_study(tmp_path: Path, form: str) -> Path:
    from mpiopt.training.data import write_hdf5

    rng = np.random.default_rng(0)
    x = rng.normal(size=(240, 6)).astype("float32")
    y = np.digitize(x[:, 0] + 0.5 * x[:, 1], [-0.5, 0.5]).astype("int64")
    (tmp_path / "tiny.py").write_text(MODEL_SOURCE)
    if form == "npz":
        np.savez(tmp_path / "part_0.npz", features=x[:120], labels=y[:120])
        np.savez(tmp_path / "part_1.npz", features=x[120:], labels=y[120:])
        data = {"npz": ["part_0.npz", "part_1.npz"]}
    else:
        for i in range(3):
            write_hdf5(tmp_path / "shards" / f"jets_{i}.h5", x[i * 80:(i + 1) * 80],
                       y[i * 80:(i + 1) * 80], features="images")
        data = {"hdf5": ["shards/jets_*.h5"], "features": "images"}
    spec = {
        "study": {"name": form},
        "objective": {"model": "tiny.py:build_paced", "data": data, "metric": "val_accuracy",
                      "direction": "maximize"},
        "search_space": {"width": {"type": "integer", "low": 2, "high": 16},
                         "lr": {"type": "real", "low": 1e-3, "high": 0.1, "prior": "log-uniform"}},
        "search": {"algorithm": "random", "trials": BUDGET, "seed": 1},
        "training": {"epochs": 2, "batch_size": 16, "kfold": 2},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def trials_of(url: str, name: str):
    return study_state(url, name)


def wait_for_a_finished_trial(url: str, name: str, job, limit_s=240) -> None:
    from mpiopt.trial import TrialStatus

    end = time.monotonic() + limit_s
    while time.monotonic() < end and job.poll() is None:
        try:
            if any(t.status is TrialStatus.COMPLETE for t in trials_of(url, name)[1]):
                return
        except Exception:
            pass
        time.sleep(0.3)
    out, err = job.communicate(timeout=60) if job.poll() is not None else ("", "")
    raise AssertionError(f"no trial finished; the job said:\n{out}\n{err}")


@pytest.mark.parametrize("form", ["npz", "hdf5"])
def test_a_data_file_study_runs_under_mpiexec_is_interrupted_and_resumes(tmp_path, form):
    from mpiopt.trial import StudyStatus, TrialStatus

    spec = write_study(tmp_path, form)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    job = subprocess.Popen([str(BIN / "mpiexec"), "-n", "3", str(BIN / "mpiopt"), "search", str(spec),
                            "--storage", url], cwd=tmp_path, text=True,
                           env=dict(subprocess_env(), PACED="1"),      # (test_training.build_paced)
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for_a_finished_trial(url, form, job)
        os.killpg(job.pid, signal.SIGINT)
        out, err = job.communicate(timeout=90)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    if job.returncode == 0:  # the budget finished before the signal arrived: nothing to resume
        pytest.fail(f"the study finished before it could be interrupted:\n{out}")
    assert job.returncode == 130, out + err
    assert f"resume with: {resume_with(3)} {form} --storage" in err
    study, before = trials_of(url, form)
    assert study.status is StudyStatus.INTERRUPTED
    assert not [t for t in before if t.status is TrialStatus.RUNNING]
    finished = {t.number: (t.params, t.value) for t in before if t.status is TrialStatus.COMPLETE}
    assert finished

    proc = mpiopt("resume", form, "--storage", url, np=3, cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    study, after = trials_of(url, form)
    assert study.status is StudyStatus.COMPLETE
    assert sorted(t.number for t in after) == list(range(BUDGET))
    assert all(t.status is TrialStatus.COMPLETE for t in after), [(t.status, t.error) for t in after]
    for t in after:                                      # nothing finished was lost or re-run
        if t.number in finished:
            assert (t.params, t.value) == finished[t.number] and t.attempt == 0
    keys = {tuple(sorted(t.params.items())) for t in after}
    assert len(keys) == BUDGET                           # and no parameter set came twice
    assert all(0.0 <= t.value <= 1.0 and len(t.fold_values) == 2 for t in after)
