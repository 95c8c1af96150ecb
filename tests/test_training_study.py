"""An end-to-end Keras study on 5 ranks (coordinator + 2 groups of 2) with pruning on,
which imports no torch on any rank.

Tiny on purpose: 6 trials of a one-layer network on 300 samples, 3 epochs, 2 folds that
each group trains concurrently (one rank per fold). Checks that what the trainer reports
reaches the database as the coordinator records it: learning curves, fold values, and the
value of a pruned trial being its last reported one.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import imported, mpiopt, watching_imports  # noqa: E402
from test_training import write_case  # noqa: E402


def test_keras_study_with_pruning_on_five_ranks(tmp_path):
    pytest.importorskip("tensorflow")
    from mpiopt.storage import open_storage
    from mpiopt.trial import StudyStatus, TrialStatus

    spec_path = write_case(tmp_path, training={
        "epochs": 3, "batch_size": 32, "kfold": 2,
        "pruning": {"pruner": "median", "warmup_epochs": 0, "min_trials": 1}})
    spec = yaml.safe_load(spec_path.read_text())
    spec["search"] = {"algorithm": "random", "trials": 6, "seed": 4}
    spec["search_space"]["lr"]["low"] = 1e-5  # some trials learn far too slowly: pruned
    spec["search_space"]["momentum"] = {"type": "real", "low": 0.0, "high": 0.9}  # never read
    spec["resources"] = {"group_size": 2}
    spec_path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'study.db'}"
    env, imports = watching_imports(tmp_path)
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"                          # all of TensorFlow's noise
    proc = mpiopt("search", spec_path, "--storage", url, np=5, cwd=tmp_path, timeout=400, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    seen = imported(imports)            # the four group ranks loaded Keras; nobody torch
    assert len(seen["keras"]) == 4 and not seen["torch"], seen
    # TensorFlow's native start-up lines went to the study's log, none to the terminal
    log = tmp_path / "tiny.log"
    assert f"start-up messages go to {log}" in proc.stdout
    native = ("oneDNN", "absl", "cpu_feature_guard", "cuda")   # which ones: TF build and CPU
    assert any(w in log.read_text() for w in native), log.read_text()
    warned = [ln for ln in proc.stdout.splitlines() if "never read" in ln]
    assert len(warned) == 1 and "'momentum'" in warned[0] and "'lr'" not in warned[0], warned
    noise = [ln for ln in (proc.stdout + proc.stderr).splitlines()
             if any(w in ln for w in native)]
    assert not noise, noise

    storage = open_storage(url)
    try:
        study = storage.get_study("tiny")
        trials = storage.get_trials(study.id)
    finally:
        storage.close()
    assert study.status == StudyStatus.COMPLETE and len(trials) == 6
    assert {t.status for t in trials} <= {TrialStatus.COMPLETE, TrialStatus.PRUNED}
    for t in trials:
        curve = t.intermediate
        assert curve and sorted(curve) == list(range(1, len(curve) + 1)), t
        assert t.device and t.device.split(": ")[0] in ("cpu", "gpu"), t.device
        assert t.suggest_seconds is not None and t.suggest_seconds >= 0
        if t.status == TrialStatus.COMPLETE:
            assert len(curve) == 3 and len(t.fold_values) == 2
            # the trace's spans: each fold's, holding its 3 epochs in order
            folds = {s["fold"]: s for s in t.spans if s["kind"] == "fold"}
            assert sorted(folds) == [0, 1]
            for f, span in folds.items():
                epochs = [s for s in t.spans if s["kind"] == "epoch" and s["fold"] == f]
                assert [s["epoch"] for s in epochs] == [1, 2, 3]
                assert span["start"] <= epochs[0]["start"] < epochs[0]["end"] <= span["end"]
                assert all(a["end"] <= b["start"] + 1e-3 for a, b in zip(epochs, epochs[1:]))
            assert t.value == pytest.approx(sum(t.fold_values) / 2)
            assert t.metrics["val_accuracy"] == pytest.approx(t.value)
        else:
            assert t.value == pytest.approx(curve[max(curve)])
            # a pruned trial keeps the spans of what it ran (its leader's fold: concurrent)
            assert [s["epoch"] for s in t.spans if s["kind"] == "epoch"] == sorted(curve), t.spans
