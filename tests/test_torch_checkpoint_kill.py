"""A real kill -9 of an mpiexec job mid-trial of a torch study, then --resume: the trial
continues from its checkpoint's epoch and ends with the value of an uninterrupted run
(allreduce on a group of two ranks, dropout, the same seed). Finished trials'
checkpoints go; the trial's model is kept as a .pt state_dict, and training.refit's
model is made on one group at the end. The torch twin of test_checkpoint_kill.py.
"""
from __future__ import annotations

import subprocess
import time

import pytest
import yaml

from conftest import BIN, mpiopt, study_state, subprocess_env
from test_chaos import _kill
from mpiopt.trial import TrialStatus

pytest.importorskip("torch")

from test_torch_training import write_torch_case  # noqa: E402

EPOCHS = 40


def _case(tmp_path):
    path = write_torch_case(tmp_path, training={"epochs": EPOCHS, "batch_size": 8,
                                                "refit": True})
    spec = yaml.safe_load(path.read_text())
    spec["search"] = {"algorithm": "random", "trials": 1, "seed": 3}
    spec["resources"] = {"group_size": 2}
    path.write_text(yaml.safe_dump(spec))
    return path


def _epoch(store):
    from mpiopt.artifacts import checkpoint

    ckpt = checkpoint.load(store / "checkpoints" / "trial-0" / "fold-0.npz")
    return -1 if ckpt is None else ckpt["meta"]["epoch"]


def test_kill_9_mid_trial_then_resume_continues_from_the_checkpoint_epoch(tmp_path):
    spec = _case(tmp_path)
    plain = f"sqlite:///{tmp_path / 'plain.db'}"
    proc = mpiopt("search", spec, "--storage", plain, np=3, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [expected] = study_state(plain, "tiny-torch")[1]
    kept = tmp_path / "plain-artifacts" / "tiny-torch"
    assert (kept / "models" / "trial-0.pt").is_file()
    assert (kept / "refit.pt").is_file()               # training.refit, on one group
    assert not (kept / "checkpoints" / "trial-0").exists()

    url = f"sqlite:///{tmp_path / 'killed.db'}"
    store = tmp_path / "killed-artifacts" / "tiny-torch"
    job = subprocess.Popen([str(BIN / "mpiexec"), "-n", "3", str(BIN / "mpiopt"), "search",
                            str(spec), "--storage", url], cwd=tmp_path, env=subprocess_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    end = time.monotonic() + 120
    while _epoch(store) < 3:
        assert job.poll() is None, "the job ended before the kill: make the trial longer"
        assert time.monotonic() < end, "no checkpoint was written"
        time.sleep(0.02)
    _kill(job, "job")
    job.communicate(timeout=30)
    at_kill = _epoch(store)
    assert 3 <= at_kill < EPOCHS
    [killed] = study_state(url, "tiny-torch")[1]
    assert killed.status is TrialStatus.RUNNING

    proc = mpiopt("search", spec, "--storage", url, "--resume", np=3, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [resumed] = study_state(url, "tiny-torch")[1]
    assert resumed.status is TrialStatus.COMPLETE
    assert resumed.value == pytest.approx(expected.value, abs=1e-6)
    assert resumed.intermediate == pytest.approx(expected.intermediate, abs=1e-6)
    [mark] = [s for s in resumed.spans if s["kind"] == "resume"]
    assert mark["fold"] == 0 and mark["epoch"] >= at_kill   # continued, not started again
    first = min(s["epoch"] for s in resumed.spans if s["kind"] == "epoch")
    assert first == mark["epoch"] + 1                       # its first epoch: the next one
    assert not (store / "checkpoints" / "trial-0").exists()
    assert (store / "models" / "trial-0.pt").is_file()
    assert (store / "refit.pt").is_file()
