"""Checkpoints on one rank, in process: a trial stopped mid-way continues where it was and
ends with the value of an uninterrupted one; the kept model reproduces its fold's value.

Tiny model of tests/test_training.py (TensorFlow imported once for the module).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from test_training import write_case  # noqa: E402


@pytest.fixture(autouse=True)
def _own_folder(tmp_path, monkeypatch):
    """The commands run here write their native log into the working directory (or where
    MPIOPT_NATIVE_LOG says): keep both inside the test's folder, not the checkout."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPIOPT_NATIVE_LOG", str(tmp_path / "native.log"))


def _train(spec, artifacts=None, report=None, seed=5):
    from mpi4py import MPI

    from mpiopt.training import run_training

    return run_training(spec, {"width": 8, "lr": 0.02}, MPI.COMM_SELF, seed, report=report,
                        artifacts=artifacts)


def _spec(tmp_path, **training):
    from mpiopt.spec import load_spec

    return load_spec(write_case(tmp_path / "case", training={"epochs": 3, **training}))


def _stop_at(step):
    """report() cancelling the trial at `step`, (fold, epoch) or an epoch of fold 0."""
    from mpiopt.errors import TrialCancelled

    seen = []
    step = (0, step) if isinstance(step, int) else step

    def report(epoch, value, fold=0):
        seen.append((fold, epoch) if fold else epoch)
        return TrialCancelled("the job is ending") if (fold, epoch) == step else True

    return report, seen


def test_a_stopped_kfold_trial_resumes_from_its_checkpoints_to_the_same_value(tmp_path):
    from mpiopt.artifacts import TrialArtifacts
    from mpiopt.errors import TrialCancelled

    spec = _spec(tmp_path, kfold=2)
    plain = _train(spec)
    art = TrialArtifacts(checkpoints=str(tmp_path / "ck"), every=1,
                         model=str(tmp_path / "models" / "trial-0.keras"))
    report, seen = _stop_at((1, 1))
    with pytest.raises(TrialCancelled):
        _train(spec, art, report)
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["fold-0.npz", "fold-1.npz"]
    assert not (tmp_path / "models" / "trial-0.keras").exists()
    report, seen = _stop_at(None)
    resumed = _train(spec, art, report)
    # each fold's checkpointed last epoch is reported again (a kill may have come between
    # its checkpoint and its report; it is one row), then training goes on at epoch 2
    assert seen == [3, (1, 1), (1, 2), (1, 3)]
    assert resumed["fold_values"] == pytest.approx(plain["fold_values"], abs=1e-6)
    assert resumed["value"] == pytest.approx(plain["value"], abs=1e-6)
    assert list(resumed["intermediate"]) == [(f, e) for f in (0, 1) for e in (1, 2, 3)]
    assert resumed["intermediate"][(1, 3)] == pytest.approx(plain["intermediate"][(1, 3)],
                                                            abs=1e-6)


def test_the_kept_model_loads_in_plain_keras_and_reproduces_its_folds_value(tmp_path):
    import keras

    from mpiopt.artifacts import TrialArtifacts
    from mpiopt.training.kfold import kfold_splits

    spec = _spec(tmp_path, kfold=2, epochs=4)
    path = tmp_path / "models" / "trial-0.keras"
    result = _train(spec, TrialArtifacts(model=str(path)))
    note = json.loads(path.with_suffix(".json").read_text())
    assert note["fold"] == 1 and note["kfold"] == 2
    assert note["fold_value"] == pytest.approx(result["fold_values"][1])
    model = keras.models.load_model(path)
    import importlib.util

    loader = importlib.util.spec_from_file_location("tiny", tmp_path / "case" / "tiny.py")
    tiny = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(tiny)
    x, y = tiny.load()
    _, val = kfold_splits(y, 2, 5)[1]        # the last fold's validation part (trial seed 5)
    got = model.evaluate(x[val], y[val], verbose=0, return_dict=True)
    assert got["accuracy"] == pytest.approx(result["fold_values"][1], abs=1e-6)


def test_checkpoint_every_two_epochs_and_off(tmp_path):
    from mpiopt.artifacts import TrialArtifacts, checkpoint
    from mpiopt.errors import TrialCancelled

    spec = _spec(tmp_path, epochs=5)
    art = TrialArtifacts(checkpoints=str(tmp_path / "ck"), every=2)
    report, _ = _stop_at(3)
    with pytest.raises(TrialCancelled):
        _train(spec, art, report)
    assert checkpoint.load(tmp_path / "ck" / "fold-0.npz")["meta"]["epoch"] == 2
    report, seen = _stop_at(None)
    _train(spec, art, report)
    assert seen == [2, 3, 4, 5]              # from the checkpoint of epoch 2
    off = TrialArtifacts(checkpoints=str(tmp_path / "off"), every=0)
    _train(spec, off)
    assert not (tmp_path / "off").exists()


def test_no_space_left_is_an_artifact_store_error(tmp_path, monkeypatch):
    import errno

    from mpiopt.artifacts import TrialArtifacts, checkpoint
    from mpiopt.errors import ArtifactStoreError

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "save", full)
    spec = _spec(tmp_path, epochs=2)
    with pytest.raises(ArtifactStoreError, match="storage.artifacts: cannot write .*fold-0.npz: "
                                                 "No space left on device"):
        _train(spec, TrialArtifacts(checkpoints=str(tmp_path / "ck"), every=1))


# ---- the best k models kept, listed, exported ----------------------------------------------
def test_a_study_keeps_the_best_k_models_and_exports_the_best(tmp_path, capsys):
    import keras
    import yaml

    from mpiopt.study.api import load_study
    from mpiopt.cli.main import main
    from mpiopt.training.kfold import holdout_split

    path = write_case(tmp_path / "case", training={"epochs": 2})
    spec = yaml.safe_load(path.read_text())
    spec["search"] = {"algorithm": "random", "trials": 4, "seed": 1, "keep_models": 2}
    path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert main(["search", str(path), "--storage", url]) == 0
    store = tmp_path / "s-artifacts" / "tiny"
    with load_study("tiny", url) as study:
        trials = study.trials
        ranked = sorted(trials, key=lambda t: (-t.value, t.number))
        assert study.record.artifacts == str(store)
        best = study.best_model()
    assert sorted(p.name for p in (store / "models").glob("*.keras")) == \
        sorted(f"trial-{t.number}.keras" for t in ranked[:2])
    assert not list((store / "models" / "incoming").iterdir())
    assert not (store / "checkpoints").exists() or not list((store / "checkpoints").iterdir())
    capsys.readouterr()
    assert main(["model", "list", "tiny", "--storage", url, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["trial"] for r in rows] == [t.number for t in ranked[:2]]
    out = tmp_path / "best.keras"
    assert main(["model", "export", "tiny", "--storage", url, "-o", str(out)]) == 0
    assert f"trial {ranked[0].number}" in capsys.readouterr().out
    model = keras.models.load_model(out)
    x, y = _tiny(tmp_path).load()
    _, val = holdout_split(y, 0.2, ranked[0].seed)     # kfold 1: the trial's holdout part
    for m in (model, best):
        got = m.evaluate(x[val], y[val], verbose=0, return_dict=True)
        assert got["accuracy"] == pytest.approx(ranked[0].value, abs=1e-6)
    worst = ranked[-1].number
    assert main(["model", "export", "tiny", "--storage", url, "--trial", str(worst),
                 "-o", str(tmp_path / "x.keras")]) == 2
    assert not (tmp_path / "x.keras").exists()
    from mpiopt.errors import MpioptError

    with load_study("tiny", url) as study, pytest.raises(MpioptError, match=f"no kept model of "
                                                         f"trial {worst} .*kept: "):
        study.best_model(worst)


def _tiny(tmp_path):
    import importlib.util

    loader = importlib.util.spec_from_file_location("tiny", tmp_path / "case" / "tiny.py")
    tiny = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(tiny)
    return tiny


# ---- training fields in the search space; `mpiopt train --set` and --save ---------------------
def test_searched_training_fields_apply_to_the_trial(tmp_path):
    from mpi4py import MPI

    from mpiopt.training import run_training

    spec = _spec(tmp_path)
    short = run_training(spec, {"width": 8, "lr": 0.02, "training.epochs": 2,
                                "training.batch_size": 300}, MPI.COMM_SELF, 5)
    assert short["epochs"] == 2 and list(short["intermediate"]) == [(0, 1), (0, 2)]
    assert short["timing"]["steps"] == 2             # one batch of 300 (240 samples) per epoch
    frozen = run_training(spec, {"width": 8, "lr": 0.02, "training.learning_rate": 0.0},
                          MPI.COMM_SELF, 5)
    assert len(set(frozen["intermediate"].values())) == 1    # learning rate 0: nothing learnt
    assert "training.learning_rate" not in frozen["unread"]


@pytest.mark.parametrize("entry,message", [
    ({"training.kfold": {"type": "integer", "low": 2, "high": 3}},
     "search_space.training.kfold: training.kfold cannot be searched; these can: training.batch_size"),
    ({"training.batch_size": {"type": "real", "low": 8, "high": 64}},
     "search_space.training.batch_size: training.batch_size takes whole numbers"),
])
def test_unsearchable_training_fields_are_one_line(tmp_path, entry, message):
    import yaml

    from mpiopt.errors import SpecError
    from mpiopt.spec import load_spec

    path = write_case(tmp_path)
    spec = yaml.safe_load(path.read_text())
    spec["search_space"].update(entry)
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match=message.replace(".", r"\.")):
        load_spec(path)


def test_train_refuses_fields_it_does_not_use_and_saves_the_model(tmp_path, capsys):
    import keras

    from mpiopt.cli.main import main

    path = write_case(tmp_path / "case", training={"epochs": 2})
    assert main(["train", str(path), "--set", "training.checkpoint_every=3"]) == 2
    assert main(["train", str(path), "--set", "training.batchsize=3"]) == 2
    out = tmp_path / "m.keras"
    assert main(["train", str(path), "--set", "training.batch_size=16", "--save", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "global batch 16" in printed and f"model saved to {out}" in printed
    assert keras.models.load_model(out).count_params() > 0
    assert json.loads(out.with_suffix(".json").read_text())["fold"] == 0


# ---- the artifact store refused at the start: one line, exit 2, nothing written ----------------
def test_an_artifact_store_that_cannot_be_written_is_refused_before_anything(tmp_path, capfd):
    import yaml

    from mpiopt.cli.main import main

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    path = write_case(tmp_path / "case")
    spec = yaml.safe_load(path.read_text())
    spec["storage"] = {"artifacts": str(blocker / "store")}
    path.write_text(yaml.safe_dump(spec))
    db = tmp_path / "never.db"
    assert main(["search", str(path), "--storage", f"sqlite:///{db}"]) == 2
    err = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("mpiopt:")]
    assert err == [f"mpiopt: error: storage.artifacts: {blocker} is not a folder"]
    assert not db.exists() and blocker.read_text() == "not a folder"


def test_no_space_for_the_artifact_store_is_refused(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    from mpiopt import artifacts
    from mpiopt.errors import ArtifactStoreError

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10 * 2**20, 9 * 2**20, 2**20))
    with pytest.raises(ArtifactStoreError, match=r"storage.artifacts: .*/new: no space left "
                                                 r"\(1 MiB free"):
        artifacts.check_root(tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_refit_trains_the_best_parameters_on_all_the_data_and_keeps_that_model(tmp_path, capfd):
    import keras
    import yaml

    from mpiopt.study.api import load_study
    from mpiopt.cli.main import main

    path = write_case(tmp_path / "case", training={"epochs": 2, "kfold": 2, "refit": True})
    spec = yaml.safe_load(path.read_text())
    spec["search"] = {"algorithm": "random", "trials": 2, "seed": 2}
    path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert main(["search", str(path), "--storage", url]) == 0
    assert "refit: model kept in" in capfd.readouterr().out
    store = tmp_path / "r-artifacts" / "tiny"
    note = json.loads((store / "refit.json").read_text())
    with load_study("tiny", url) as study:
        assert note["params"] == study.best_params and note["samples"] == 300
        assert len(study.trials) == 2                     # the refit is no trial
        model = study.best_model()                        # the refit model is the default
    x, y = _tiny(tmp_path).load()
    got = model.evaluate(x, y, verbose=0, return_dict=True)   # its value: on all the data
    assert got["accuracy"] == pytest.approx(note["fold_value"], abs=1e-6)
    assert keras.models.load_model(store / "refit.keras").count_params() == model.count_params()
    assert not (store / "checkpoints" / "refit").exists()
    # a resume of the finished study does not refit again
    before = (store / "refit.keras").stat().st_mtime_ns
    assert main(["search", str(path), "--storage", url, "--resume"]) == 0
    assert (store / "refit.keras").stat().st_mtime_ns == before


def test_an_artifact_store_that_fails_mid_study_stops_it_cleanly_and_resume_goes_on(tmp_path,
                                                                                    capfd):
    """A file where the checkpoints folder should be: the first checkpoint cannot be
    written (as with a full disk). The study stops with one line and the resume command;
    the trial is INTERRUPTED, the database intact; once fixed, the resume finishes."""
    from mpiopt.study.api import load_study
    from mpiopt.cli.main import main
    from mpiopt.trial import StudyStatus, TrialStatus

    path = write_case(tmp_path / "case", training={"epochs": 2})
    url = f"sqlite:///{tmp_path / 'f.db'}"
    store = tmp_path / "f-artifacts" / "tiny"
    store.mkdir(parents=True)
    (store / "checkpoints").write_text("in the way")
    assert main(["search", str(path), "--storage", url]) == 1
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("mpiopt:")]
    assert len(lines) == 1 and "storage.artifacts: cannot write" in lines[0], lines
    assert lines[0].endswith(f"resume with: mpiopt resume tiny --storage {url}")
    with load_study("tiny", url) as study:
        assert study.record.status is StudyStatus.INTERRUPTED
        assert [t.status for t in study.trials] == [TrialStatus.INTERRUPTED]
    (store / "checkpoints").unlink()
    assert main(["search", str(path), "--storage", url, "--resume"]) == 0
    with load_study("tiny", url) as study:
        assert [t.status for t in study.trials] == [TrialStatus.COMPLETE] * 2


def test_the_stored_spec_masks_the_password_when_storage_is_a_mapping(tmp_path):
    """A Keras study stores storage.artifacts, so its storage is a mapping: the URL in it
    is masked like a plain one."""
    from dataclasses import replace

    from mpiopt.study.opening import spec_text

    spec = replace(_spec(tmp_path), storage="postgresql+psycopg://u:secret@h/db",
                   artifacts=str(tmp_path / "store"))
    text = spec_text(spec)
    assert "secret" not in text and str(tmp_path / "store") in text
