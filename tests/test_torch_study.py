"""End-to-end torch studies: real `mpiexec -n 3 mpiopt search` (the coordinator and one
group of two ranks), real SQLite.

A torch study with K-fold and pruning completes, keeps its best model as a state_dict
plain PyTorch loads, and imports no TensorFlow on any rank (every rank's imports are
watched: tests/conftest.py watching_imports); one rank and a group of two give the same
value for the same seed.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import imported, mpiopt, study_state, subprocess_env, watching_imports  # noqa: E402
from test_torch_training import write_torch_case  # noqa: E402

torch = pytest.importorskip("torch")


def _case(tmp_path, **spec_changes) -> Path:
    path = write_torch_case(tmp_path, training={
        "epochs": 3, "batch_size": 32, "kfold": 3,
        "pruning": {"pruner": "median", "warmup_epochs": 0, "min_trials": 1}})
    spec = yaml.safe_load(path.read_text())
    spec["resources"] = {"group_size": 2}
    spec["search"] = {"algorithm": "random", "trials": 4, "seed": 4}
    spec["search_space"]["training.optimizer.lr"] = {"type": "real", "low": 1e-4, "high": 0.1,
                                                     "prior": "log-uniform"}
    spec.update(spec_changes)
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_torch_study_with_kfold_and_pruning_completes_without_tensorflow(tmp_path):
    from mpiopt.trial import StudyStatus, TrialStatus

    env, log = watching_imports(tmp_path)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    proc = mpiopt("search", _case(tmp_path), "--storage", url, np=3, cwd=tmp_path, env=env,
                  timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    study, trials = study_state(url, "tiny-torch")
    assert study.status == StudyStatus.COMPLETE and len(trials) == 4
    assert {t.status for t in trials} <= {TrialStatus.COMPLETE, TrialStatus.PRUNED}
    assert any(t.status is TrialStatus.COMPLETE for t in trials)
    for t in trials:
        steps = list(t.intermediate)
        # (fold, epoch): each fold's epochs from 1, the folds in order, a pruned trial's cut short
        assert steps == [(f, e) for f in range(3) for e in range(1, 4)][:len(steps)], t
        if t.status is TrialStatus.COMPLETE:
            assert len(steps) == 9 and len(t.fold_values) == 3
            assert t.value == pytest.approx(sum(t.fold_values) / 3)
            assert {"val_loss", "val_accuracy", "n_params"} <= set(t.metrics)
        else:
            assert t.value == pytest.approx(t.intermediate[steps[-1]])
    seen = imported(log)
    assert len(seen["torch"]) == 2, seen              # the group's two ranks trained ...
    assert not seen["tensorflow"] and not seen["keras"], seen   # ... and nobody loaded TF

    best = max((t for t in trials if t.status is TrialStatus.COMPLETE), key=lambda t: t.value)
    out = tmp_path / "best.pt"
    proc = mpiopt("model", "export", "tiny-torch", "--storage", url, "-o", out, env=env)
    assert proc.returncode == 0 and f"trial {best.number}" in proc.stdout, proc.stderr
    state = torch.load(out)                            # plain PyTorch, weights only
    module = torch.nn.Sequential(torch.nn.Linear(6, best.params["width"]), torch.nn.Tanh(),
                                 torch.nn.Dropout(0.1), torch.nn.Linear(best.params["width"], 3))
    module.load_state_dict(state)
    assert sum(p.numel() for p in module.parameters()) == best.metrics["n_params"]


def _one_trial(folder: Path, ranks: int, env: dict | None = None, model="build_plain",
               more: str = ""):
    """The same seed's one trial (no dropout, no K-fold, no pruning) on `ranks` ranks: in
    single-process mode for 1, else under mpiexec (a group of ranks - 1). more: source
    appended to the case's model file."""
    path = _case(folder, search={"algorithm": "random", "trials": 1, "seed": 2})
    with open(folder / "tiny_torch.py", "a") as f:
        f.write(more)
    spec = yaml.safe_load(path.read_text())
    spec["objective"].update(model=f"tiny_torch.py:{model}", metric="val_loss",
                             direction="minimize")
    spec["training"].update(kfold=1, epochs=4, metrics=["accuracy"])
    del spec["search_space"]["training.optimizer.lr"]
    del spec["training"]["pruning"]
    path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{folder / 'study.db'}"
    proc = mpiopt("search", path, "--storage", url, np=None if ranks == 1 else ranks,
                  cwd=folder, env=env or subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    [trial] = study_state(url, "tiny-torch")[1]
    return trial


def test_one_rank_and_a_group_of_two_give_the_same_value(tmp_path):
    """The same seed: single-process mode (one rank) against a group of two under mpiexec
    (allreduce: the same global batches, the gradients averaged). No dropout, so the two
    differ only by float rounding."""
    one, group = _one_trial(tmp_path / "np1", 1), _one_trial(tmp_path / "np3", 3)
    assert one.params == group.params and one.seed == group.seed
    assert group.value == pytest.approx(one.value, rel=1e-4)
    assert group.metrics["val_accuracy"] == pytest.approx(one.metrics["val_accuracy"], abs=0.02)
    assert one.metrics["val_accuracy"] > 0.6          # it trained (chance is 1/3)


# appended to the case's model file: build_plain, each torch.distributed.all_reduce call
# of the rank noted in a file of its own (pid) beside it
COUNTED = """

def build_counted(params):
    import os
    from pathlib import Path

    import torch.distributed as dist

    if not hasattr(dist.all_reduce, "counted"):
        original, note = dist.all_reduce, Path(__file__).with_name(f"all_reduce.{os.getpid()}")

        def counted(*args, **kwargs):
            with open(note, "a") as f:
                f.write("1\\n")
            return original(*args, **kwargs)
        counted.counted = True
        dist.all_reduce = counted
    return build_plain(params)
"""


def test_a_group_of_two_summing_through_torch_distributed_gives_the_mpi_value(tmp_path):
    """MPIOPT_TORCH_COLLECTIVES=torch (gloo here, NCCL's path on GPUs): the group of two's
    gradient summed through the trial's process group, every step on both ranks, to the
    value MPI's sums give for the same seed. Without the variable (auto on CPUs) the
    process group is not used."""
    trials, notes = {}, {}
    for path, word in (("mpi", None), ("torch", "torch")):
        folder, env = tmp_path / path, subprocess_env()
        if word:
            env["MPIOPT_TORCH_COLLECTIVES"] = word
        trials[path] = _one_trial(folder, 3, env, model="build_counted", more=COUNTED)
        notes[path] = [len(p.read_text().split()) for p in folder.glob("all_reduce.*")]
    mpi, torch_sums = trials["mpi"], trials["torch"]
    assert notes["mpi"] == []
    # 4 epochs of ceil(240 / 32) = 8 steps, the model one bucket, on each of the 2 ranks
    assert notes["torch"] == [32, 32], notes
    assert torch_sums.params == mpi.params and torch_sums.seed == mpi.seed
    assert torch_sums.value == pytest.approx(mpi.value, rel=1e-5)
    assert torch_sums.metrics["val_accuracy"] == pytest.approx(mpi.metrics["val_accuracy"],
                                                               abs=1e-6)


def test_the_jets_torch_example_trains_and_saves_a_model_plain_pytorch_loads(tmp_path):
    """examples/jets/torch.yaml on a small copy of its generated data, through
    `mpiopt train --save`."""
    import importlib.util
    import shutil

    from conftest import EXAMPLES

    for name in ("torch.yaml", "torch_model.py", "data.py", "generate.py"):
        shutil.copy(EXAMPLES / "jets" / name, tmp_path / name)

    def module(name):
        spec = importlib.util.spec_from_file_location(f"jets_{name}", tmp_path / f"{name}.py")
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        return loaded

    generate = module("generate")
    generate.JETS_PER_FILE = 100
    assert len(generate.ensure()) == 4          # where data.py's loader finds them
    params = ["filters=4", "kernel_size=3", "dense_units=8", "dropout=0.1",
              "training.optimizer.lr=0.003", "training.epochs=2"]
    proc = mpiopt("train", tmp_path / "torch.yaml", *[a for p in params for a in ("--set", p)],
                  "--save", tmp_path / "jets.keras", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "figure of merit: val_auc" in proc.stdout
    assert f"model saved to {tmp_path / 'jets.pt'}" in proc.stdout   # the framework's suffix
    net = module("torch_model").JetCNN(4, 3, 8, 0.1)
    net.load_state_dict(torch.load(tmp_path / "jets.pt"))
    assert net(torch.zeros(2, 16, 16, 1)).shape == (2, 1)
