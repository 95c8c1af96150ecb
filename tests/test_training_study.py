"""An end-to-end Keras study on 5 ranks (coordinator + 2 groups of 2) with pruning on,
which imports no torch on any rank.

Tiny on purpose: 6 trials of a one-layer network on 300 samples, 3 epochs, 2 folds that
each group trains concurrently (one rank per fold). Checks that what the trainer reports
reaches the database as the coordinator records it: learning curves, fold values, and the
value of a pruned trial being its figure of merit over what it trained. Then the same in
single-process mode (one rank: the 3 folds one after another) with training.epochs
searched: pruning is the coordinator's rule, so one process shows it with one import of
TensorFlow where each group's rank would import it again.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import imported, mpiopt, watching_imports  # noqa: E402
from test_training import write_case  # noqa: E402
from mpiopt.trial import step_text  # noqa: E402


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
        curve = t.intermediate           # each fold after each epoch, the folds side by side
        epochs = sorted({e for _, e in curve})
        assert curve and epochs == list(range(1, len(epochs) + 1)), t
        assert {f for f, _ in curve} <= {0, 1} and list(curve) == sorted(curve), t
        assert t.device and t.device.split(": ")[0] in ("cpu", "gpu"), t.device
        assert t.suggest_seconds is not None and t.suggest_seconds >= 0
        if t.status == TrialStatus.COMPLETE:
            assert list(curve) == [(f, e) for f in (0, 1) for e in (1, 2, 3)]
            assert len(t.fold_values) == 2
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
        else:         # its folds' best epochs so far (each fold trained the last epoch, its
            assert 0 < t.value <= 1          # value not all reported: the sequential test)
            assert t.error.startswith(f"pruned at {step_text(max(curve), 2)}: its figure so far")
            # a pruned trial keeps the spans of what it ran (its leader's fold: concurrent)
            assert [s["epoch"] for s in t.spans if s["kind"] == "epoch"] == \
                [e for f, e in curve if f == 0], t.spans


def test_folds_one_after_another_are_pruned_like_with_like(tmp_path):
    """Issue 62, in single-process mode (the 3 folds one after another) with
    training.epochs searched: each value is stored as (fold, epoch), each fold's epochs
    from 1 up to the trial's own epochs; a pruned trial was judged at its last report, says
    where and against what (in the database, the progress line and `mpiopt show`), and is
    valued as a finished trial is (its folds' best epochs, the mean) over the folds it
    finished (with none, its fold's best so far);
    no trial is pruned at its very last epoch; the report draws the curves fold by fold
    from what was stored."""
    pytest.importorskip("tensorflow")
    from mpiopt.reporting.figures import panel
    from mpiopt.reporting.view import StudyView
    from mpiopt.storage import open_storage
    from mpiopt.trial import TrialStatus

    spec_path = write_case(tmp_path, training={
        "epochs": 3, "batch_size": 32, "kfold": 3,
        "pruning": {"pruner": "median", "warmup_epochs": 1, "min_trials": 1}})
    spec = yaml.safe_load(spec_path.read_text())
    spec["search"] = {"algorithm": "random", "trials": 8, "seed": 5}
    spec["search_space"]["lr"]["low"] = 1e-5      # some trials learn far too slowly
    spec["search_space"]["training.epochs"] = {"type": "integer", "low": 2, "high": 4}
    spec["resources"] = {"group_size": 1}
    spec_path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'study.db'}"
    proc = mpiopt("search", spec_path, "--storage", url, cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    with open_storage(url) as st:
        record = st.get_study("tiny")
        trials = st.get_trials(record.id)
    pruned = [t for t in trials if t.status == TrialStatus.PRUNED]
    assert len(trials) == 8 and pruned, [(t.status, t.intermediate) for t in trials]
    for t in trials:
        own = t.params["training.epochs"]
        folds = {f: sorted(e for g, e in t.intermediate if g == f) for f, _ in t.intermediate}
        assert sorted(folds) == list(range(len(folds))), t.intermediate
        assert all(epochs == list(range(1, len(epochs) + 1)) and len(epochs) <= own
                   for epochs in folds.values()), t.intermediate
        if t.status == TrialStatus.COMPLETE:
            assert folds == {f: list(range(1, own + 1)) for f in range(3)}
            continue
        last = max(t.intermediate)
        assert last != (2, own), "pruned at its last epoch"
        finished = [f for f in folds if f < last.fold] or [last.fold]
        best = [max(v for (g, _), v in t.intermediate.items() if g == f) for f in finished]
        assert t.value == pytest.approx(sum(best) / len(best))
        assert re.fullmatch(rf"pruned at fold {last.fold} epoch {last.epoch}: its figure so "
                            r"far [\d.e-]+ is worse than the median [\d.e-]+ of \d+ "
                            r"other trials? there", t.error), t.error
        assert f"    {t.error}" in proc.stdout.splitlines()
    deepest = max(pruned, key=lambda t: max(t.intermediate))
    shown = mpiopt("show", "tiny", str(deepest.number), "--storage", url, check=True).stdout
    assert f"pruned:\n  {deepest.error}" in shown
    assert ("  fold  epoch  value" in shown) == (max(deepest.intermediate).fold > 0)
    curves = panel("curves", StudyView.of(record, trials))
    assert curves.data["folds"]["count"] == 3 and curves.data["folds"]["widths"] == \
        [max(e for t in trials for f, e in t.intermediate if f == fold) for fold in range(3)]


def test_asha_with_folds_one_after_another_decides_at_a_folds_end(tmp_path):
    """ASHA in single-process mode (the 3 folds one after another), training.epochs
    searched, rungs at 1, 2, 4, 8 epochs trained (rf 2): whatever a trial's epochs per
    fold, its rungs fall in fold 0 and fold 1, so a pruned trial was stopped at fold 1's or
    fold 2's first report, on its finished folds, and says so; no trial stops inside a
    fold."""
    pytest.importorskip("tensorflow")
    from mpiopt.storage import open_storage
    from mpiopt.trial import TrialStatus

    spec_path = write_case(tmp_path, training={
        "epochs": 3, "batch_size": 32, "kfold": 3,
        "pruning": {"pruner": "asha", "reduction_factor": 2, "min_epoch": 1}})
    spec = yaml.safe_load(spec_path.read_text())
    spec["search"] = {"algorithm": "random", "trials": 6, "seed": 5}
    spec["search_space"]["lr"]["low"] = 1e-5      # some trials learn far too slowly
    spec["search_space"]["training.epochs"] = {"type": "integer", "low": 2, "high": 4}
    spec["resources"] = {"group_size": 1}
    spec_path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'study.db'}"
    proc = mpiopt("search", spec_path, "--storage", url, cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    with open_storage(url) as st:
        trials = st.get_trials(st.get_study("tiny").id)
    pruned = [t for t in trials if t.status == TrialStatus.PRUNED]
    assert len(trials) == 6 and pruned, [(t.status, t.intermediate) for t in trials]
    for t in pruned:
        last = max(t.intermediate)
        assert last in [(1, 1), (2, 1)], t.intermediate
        done = "fold 0" if last.fold == 1 else "folds 0-1"
        assert re.fullmatch(rf"pruned at fold {last.fold} epoch 1 \(the rung at fold "
                            rf"{last.fold - 1}'s end\): its mean over {done} [\d.e-]+ is "
                            rf"outside the best 1/2 of the \d+ trials that finished {done} "
                            r"\(the cut: [\d.e-]+\)", t.error), t.error
