"""The text a person reads: durations, `status`'s last update (pure functions, no MPI)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from mpiopt.durations import format_duration
from mpiopt.reporting.tables import status_lines, status_summary, trial_row
from mpiopt.trial import FrozenTrial, StudyStatus, TrialStatus


@pytest.mark.parametrize("seconds,text", [
    (83, "1m23s"), (83.4, "1m23s"), (600, "10m"), (3725, "1h2m5s"), (3, "3s"), (0.25, "0.25s"),
    (0.0042, "4.2ms"), (5e-05, "0.05ms"),
    (9.87, "9.9s"), (0, "0s"), (None, "-")])
def test_durations_read_as_people_write_them(seconds, text):
    assert format_duration(seconds) == text


def test_tables_show_durations_and_json_keeps_seconds():
    trial = FrozenTrial(id=1, study_id=1, number=0, status=TrialStatus.COMPLETE, params={},
                        duration=83.2)
    assert trial_row(trial, human=True)["duration"] == "1m23s"
    assert trial_row(trial)["duration"] == 83.2


def test_last_update_is_the_last_recorded_event_not_the_study_row():
    now = datetime.now(timezone.utc)
    record = SimpleNamespace(
        name="s", status=StudyStatus.COMPLETE, direction="minimize", metric="loss",
        spec_text="search: {trials: 5}", created_at=now - timedelta(hours=2),
        updated_at=now - timedelta(hours=2), lease=None)
    counts = {s: 0 for s in TrialStatus}
    groups = [{"group": 0, "host": "n1", "last_at": now - timedelta(seconds=95), "running": None},
              {"group": 1, "host": "n2", "last_at": now - timedelta(hours=1), "running": None}]
    summary = status_summary(record, counts, None, groups)
    assert 94 <= summary["since_update"] <= 110
    text = "\n".join(status_lines(summary))
    assert "last update 1m3" in text and "(2h ago)" in text


def test_status_counts_the_queued_parameter_sets():
    now = datetime.now(timezone.utc)
    record = SimpleNamespace(
        name="s", status=StudyStatus.COMPLETE, direction="minimize", metric="loss",
        spec_text="search: {trials: 5}", created_at=now, updated_at=now, lease=None)
    counts = {s: 0 for s in TrialStatus} | {TrialStatus.COMPLETE: 5, TrialStatus.PENDING: 2}
    summary = status_summary(record, counts, None)
    assert summary["queued"] == 2
    assert "5/5 done, 0 running, 0 failed, 0 pruned, 0 interrupted, 2 queued" in status_lines(summary)[1]
    counts[TrialStatus.PENDING] = 0
    assert "queued" not in status_lines(status_summary(record, counts, None))[1]


def test_the_error_line_is_the_real_error_not_kerass_wrapper():
    from mpiopt.objective.evaluate import describe_error

    wrapped = ValueError('in user code:\n\n    File "model.py", line 3, in train_step\n'
                         "        loss = ...\n\n    ValueError: Arguments `target` and "
                         "`output` must have the same rank")
    assert describe_error(wrapped, "rank 1").splitlines()[0] == \
        "ValueError: Arguments `target` and `output` must have the same rank (rank 1)"
    assert describe_error(KeyError("lr"), "rank 2").splitlines()[0] == "KeyError: 'lr' (rank 2)"


def test_the_error_line_of_a_keras_layer_is_its_message_not_its_arguments():
    from mpiopt.objective.evaluate import describe_error

    staged = RuntimeError(
        'in user code:\n\n    File "backend.py", line 147, in loss_and_grads  *\n'
        "        y_pred = model(x, training=True)\n\n"
        "    MemoryError: Exception encountered when calling Fails.call().\n    \n"
        "    \x1b[1mout of GPU memory on world rank 2\x1b[0m\n    \n"
        "    Arguments received by Fails.call():\n      • x=tf.Tensor(shape=(None, 73))\n"
        "      • training=True")
    assert describe_error(staged, "rank 2").splitlines()[0] == \
        "MemoryError: out of GPU memory on world rank 2 (rank 2)"
    eager = ValueError("Exception encountered when calling Dense.call().\n\n\x1b[1mbad "
                       "shape\x1b[0m\n\nArguments received by Dense.call():\n  • x=...")
    assert describe_error(eager, "rank 1").splitlines()[0] == "ValueError: bad shape (rank 1)"


def test_the_error_line_of_a_tensorflow_graph_error_is_its_message():
    """TensorFlow's "Graph execution error:" names the op's definition stack first; the
    message (here a model with 3 outputs for 10 classes) comes after it."""
    from mpiopt.objective.evaluate import describe_error

    graph = ValueError(
        "Graph execution error:\n\nDetected at node compile_loss/Sparse defined at (most "
        "recent call last):\n  File \"mpiopt\", line 6, in <module>\n\n  File \"nn.py\", "
        "line 1438, in sparse_categorical_crossentropy\n\nReceived a label value of 9 which "
        "is outside the valid range of [0, 3).  Label values: 3 0 9\n\t [[{{node "
        "compile_loss/Sparse}}]] [Op:__inference_grad_flat_157]")
    assert describe_error(graph, "rank 1").splitlines()[0] == (
        "ValueError: Received a label value of 9 which is outside the valid range of [0, 3).  "
        "Label values: 3 0 9 (rank 1)")


def test_show_of_a_trial_that_reported_every_step_fits_a_screen():
    """20,000 reports (a function reporting every batch) printed 20,000 rows and a
    20,000-character sparkline; now the curve is thinned and the rows are the ends."""
    from mpiopt.reporting.tables import show_lines

    intermediate = {e: 1.0 / (e + 1) for e in range(20000)}
    trial = FrozenTrial(id=1, study_id=1, number=0, status=TrialStatus.COMPLETE, params={"x": 1.0},
                        value=0.5, intermediate=intermediate)
    lines = show_lines(trial, "s", "value", "minimize")
    assert len(lines) < 70 and max(map(len, lines)) < 120
    assert "  ... 19960 more epochs (all of them: mpiopt export)" in lines
    assert lines[-1].split() == ["19999", "5e-05"] and "     0  1" in lines
    short = show_lines(FrozenTrial(id=1, study_id=1, number=0, status=TrialStatus.COMPLETE,
                                   params={}, intermediate={e: float(e) for e in range(40)}),
                       "s", "value", "minimize")
    assert not [line for line in short if "more epochs" in line]
    assert "     0  0" in short and "    39  39" in short
