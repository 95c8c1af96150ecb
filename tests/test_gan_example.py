"""examples/gan under a real `mpiexec -n 5 mpiopt search` (the coordinator and two groups
of two ranks), on a small copy of its generated showers: the conditional GAN trains
through its own training_step with its two optimizers, its figure of merit is recorded,
no rank imports TensorFlow, and the kept model is a state_dict plain PyTorch loads.
"""
from __future__ import annotations

import importlib.util
import shutil
import sys

import pytest
import yaml

from conftest import EXAMPLES, imported, mpiopt, study_state, watching_imports
from mpiopt.trial import StudyStatus, TrialStatus

torch = pytest.importorskip("torch")

FILES = ("model.py", "physics.py", "data.py", "spec.yaml")


def _small_copy(folder):
    """The example with 320 showers, 2 epochs and 2 trials (one per group)."""
    for name in FILES:
        shutil.copy(EXAMPLES / "gan" / name, folder / name)
    (folder / "small.py").write_text("from data import showers\n\n\n"
                                     "def load():\n    return showers(320)\n")
    spec = yaml.safe_load((folder / "spec.yaml").read_text())
    spec["objective"]["data"]["loader"] = "small.py:load"
    spec["training"].update(epochs=2, batch_size=32)
    spec["search"].update(trials=2)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _example_model(folder):
    sys.path.insert(0, str(folder))          # model.py imports physics.py beside it
    try:
        spec = importlib.util.spec_from_file_location("calo_gan_model", folder / "model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(folder))


def test_the_gan_example_runs_under_mpiexec_n_5_and_keeps_a_model_plain_pytorch_loads(tmp_path):
    path = _small_copy(tmp_path)
    env, log = watching_imports(tmp_path)
    url = f"sqlite:///{tmp_path / 'gan.db'}"
    proc = mpiopt("search", path, "--storage", url, np=5, cwd=tmp_path, env=env, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    study, trials = study_state(url, "calo-gan")
    assert study.status == StudyStatus.COMPLETE and len(trials) == 2
    assert {t.status for t in trials} == {TrialStatus.COMPLETE}, [t.error for t in trials]
    assert len({t.group for t in trials}) == 2               # one trial on each group
    for t in trials:
        assert {"loss", "val_fom", "val_longitudinal", "val_transverse", "val_sampling",
                "n_params"} <= set(t.metrics), t.metrics
        assert t.value == min(t.intermediate.values()) and list(t.intermediate) == [(0, 1), (0, 2)]
        assert t.value == pytest.approx(t.metrics["val_longitudinal"] + t.metrics["val_transverse"]
                                        + t.metrics["val_sampling"], rel=1e-5)
    seen = imported(log)
    assert len(seen["torch"]) == 4 and not seen["tensorflow"], seen   # the groups' ranks

    best = min(trials, key=lambda t: t.value)
    out = tmp_path / "gan.pt"
    proc = mpiopt("model", "export", "calo-gan", "--storage", url, "-o", out, env=env)
    assert proc.returncode == 0 and f"trial {best.number}" in proc.stdout, proc.stderr
    gan = _example_model(tmp_path).build_model(best.params)
    gan.load_state_dict(torch.load(out))                  # plain PyTorch, weights only
    showers = gan.showers(torch.full((3, 1), 0.5))
    assert showers.shape == (3, 1, 8, 8, 8) and torch.isfinite(showers).all()
