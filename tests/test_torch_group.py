"""A function objective's own DistributedDataParallel loop in mpiopt.torch_group, under
real `mpiexec` jobs and real SQLite.

- Two groups of two ranks (mpiexec -n 5) run their DDP loops at once: each trial's
  process group holds its own group's two ranks only, the torchrun variables are set,
  DDP keeps the ranks' weights equal, and nobody imports TensorFlow.
- A pruned trial stops on both ranks of its group together (the member is not left in
  DDP's next allreduce), and the study goes on.
- A rank killed with SIGKILL mid-trial, then --resume: the trial continues after its
  checkpoint's epoch, says so (a "resume" mark in its record), keeps the epochs it had,
  and ends with the value of the same loop run straight through in one process.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from conftest import imported, mpiopt, study_state, subprocess_env, watching_imports
from mpiopt.trial import StudyStatus, TrialStatus

torch = pytest.importorskip("torch")

EPOCHS = 6
SOURCE = '''
import os
import signal
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

import mpiopt

HERE = Path(__file__).resolve().parent
EPOCHS = {epochs}


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 6)).astype("float32")
    y = (x[:, :1] - 2 * x[:, 1:2]).astype("float32")
    return torch.from_numpy(x), torch.from_numpy(y)


def fit(params, comm, seed=3):
    """Plain DDP code: each rank takes its half of every batch of 32."""
    x, y = data()
    with mpiopt.torch_group(comm) as group:
        torch.manual_seed(seed)
        net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1)).to(group.device)
        model = DistributedDataParallel(net)
        optimizer = torch.optim.SGD(model.parameters(), lr=params["lr"], momentum=0.5)
        start = group.restore(model=model, optimizer=optimizer)
        value = None
        for epoch in range(start + 1, EPOCHS + 1):
            for i in range(0, len(x), 32):
                xb, yb = x[i:i + 32][group.rank::group.size], y[i:i + 32][group.rank::group.size]
                loss = F.mse_loss(model(xb), yb)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            with torch.no_grad():
                value = float(F.mse_loss(model(x), y))
            group.report(epoch, value)
            group.save(epoch, model=model, optimizer=optimizer)
            kill_at = HERE / "kill-at"
            if group.rank == 0 and kill_at.exists() and epoch == int(kill_at.read_text()):
                kill_at.unlink()
                os.kill(os.getpid(), signal.SIGKILL)       # a kill -9 mid-trial
        return {{"value": value, **facts(group, model)}}


def facts(group, model):
    """What the test checks of the process group, seen from inside the trial."""
    mine = torch.tensor([float(MPI.COMM_WORLD.Get_rank())])
    dist.all_reduce(mine)                                   # over this trial's group only
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    low, high = weights.clone(), weights.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return {{"world_ranks_sum": float(mine), "group_size": float(dist.get_world_size()),
            "weights_agree": float(torch.equal(low, high)),
            "torchrun_env": float(os.environ["WORLD_SIZE"] == "2"
                                  and os.environ["RANK"] == str(group.rank)),
            "together": together(group)}}


def together(group):
    """1 when the other group's trial was running at the same time (a bounded wait), in a
    study that asks (a folder "started")."""
    marks = HERE / "started"
    if not marks.is_dir():
        return 0.0
    if group.rank == 0:
        (marks / str(os.getpid())).touch()
    seen = 0.0
    if group.rank == 0:
        end = time.monotonic() + 120
        while time.monotonic() < end and seen == 0.0:
            seen = 1.0 if len(list(marks.iterdir())) >= 2 else 0.0
            time.sleep(0.05)
    return seen


def objective(params, comm, seed):
    return fit(params, comm, seed)
'''


def _case(folder: Path, **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ddp.py").write_text(SOURCE.format(epochs=EPOCHS))
    spec = {"study": {"name": "ddp"},
            "objective": {"function": "ddp.py:objective", "metric": "value",
                          "direction": "minimize"},
            "search_space": {"lr": {"type": "real", "low": 0.01, "high": 0.1}},
            "search": {"algorithm": "random", "trials": 2, "seed": 1},
            "resources": {"group_size": 2}}
    for key, value in changes.items():
        spec.setdefault(key, {}).update(value)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_whether_a_function_takes_comm_is_read_from_its_file_unrun(tmp_path):
    """Rank 0 decides on an artifact store for a function study before any rank imports
    the objective (mpiopt.run.startup): a def's parameters, else "it may"."""
    from mpiopt.refs import may_take

    (tmp_path / "f.py").write_text(
        "raise SystemExit('never run')\n\ndef plain(params, seed):\n    pass\n\n"
        "def group(params, *, comm):\n    pass\n\ndef anything(params, **kw):\n    pass\n\n"
        "made = plain\n\ndef again(params, comm):\n    pass\n\nagain = plain\n")
    taken = {name: may_take(f"f.py:{name}", "comm", tmp_path)
             for name in ("plain", "group", "anything", "made", "again", "missing")}
    assert taken == {"plain": False, "group": True, "anything": True, "made": True,
                     "again": True, "missing": True}
    assert may_take("nowhere.py:f", "comm", tmp_path)


def test_two_groups_run_their_own_ddp_loops_at_once(tmp_path):
    (tmp_path / "started").mkdir()               # each trial waits to see the other's start
    env, log = watching_imports(tmp_path)
    url = f"sqlite:///{tmp_path / 'ddp.db'}"
    proc = mpiopt("search", _case(tmp_path), "--storage", url, np=5, cwd=tmp_path, env=env,
                  timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    study, trials = study_state(url, "ddp")
    assert study.status == StudyStatus.COMPLETE
    assert [t.status for t in trials] == [TrialStatus.COMPLETE] * 2, [t.error for t in trials]
    # world ranks 1-2 are group 0, 3-4 group 1: each process group held its own two
    assert sorted(t.metrics["world_ranks_sum"] for t in trials) == [3.0, 7.0]
    for t in trials:
        assert t.metrics["group_size"] == 2 and t.metrics["weights_agree"] == 1.0, t.metrics
        assert t.metrics["torchrun_env"] == 1.0 and t.metrics["together"] == 1.0, t.metrics
        assert list(t.intermediate) == [(0, e) for e in range(1, EPOCHS + 1)]   # (fold, epoch)
    seen = imported(log)
    assert len(seen["torch"]) == 4 and not seen["tensorflow"], seen


def test_a_pruned_trial_stops_on_every_rank_of_its_group(tmp_path):
    path = _case(tmp_path, search={"trials": 2, "initial_trials": [{"lr": 0.05}, {"lr": 0.01}]},
                 training={"pruning": {"pruner": "median", "warmup_epochs": 0, "min_trials": 1}})
    url = f"sqlite:///{tmp_path / 'ddp.db'}"
    proc = mpiopt("search", path, "--storage", url, np=3, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    first, second = study_state(url, "ddp")[1]
    assert first.status is TrialStatus.COMPLETE
    assert second.status is TrialStatus.PRUNED and list(second.intermediate) == [(0, 1)]
    assert second.value == second.intermediate[0, 1] > first.intermediate[0, 1]


def _straight_through(folder: Path, lr: float, seed: int) -> float:
    """The same loop in this process (a group of one: DDP over one rank, whole batches),
    outside any trial: restore finds nothing and save keeps nothing."""
    from mpi4py import MPI

    from mpiopt.refs import load_callable

    fit = load_callable(f"{folder / 'ddp.py'}:fit")
    return fit({"lr": lr}, MPI.COMM_SELF, seed)["value"]


def test_a_rank_killed_mid_trial_continues_from_its_checkpoint_on_resume(tmp_path):
    path = _case(tmp_path, search={"trials": 1})
    (tmp_path / "kill-at").write_text("3")
    url = f"sqlite:///{tmp_path / 'ddp.db'}"
    store = tmp_path / "ddp-artifacts" / "ddp" / "checkpoints" / "trial-0"
    killed = mpiopt("search", path, "--storage", url, np=3, cwd=tmp_path, timeout=300)
    assert killed.returncode != 0 and not (tmp_path / "kill-at").exists(), killed.stdout
    [trial] = study_state(url, "ddp")[1]
    assert trial.status is TrialStatus.RUNNING and list(trial.intermediate) == [(0, 1), (0, 2), (0, 3)]
    assert (store / "torch.pt").is_file()

    proc = mpiopt("search", path, "--storage", url, "--resume", np=3, cwd=tmp_path,
                  timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    [trial] = study_state(url, "ddp")[1]
    assert trial.status is TrialStatus.COMPLETE
    [mark] = [s for s in trial.spans if s["kind"] == "resume"]
    assert mark["epoch"] == 3                      # continued after the checkpoint's epoch
    assert list(trial.intermediate) == [(0, e) for e in range(1, EPOCHS + 1)]
    assert not store.exists()                      # a finished trial's checkpoints go
    sys.path.insert(0, str(tmp_path))
    expected = _straight_through(tmp_path, trial.params["lr"], trial.seed)
    assert trial.value == pytest.approx(expected, rel=1e-5)
