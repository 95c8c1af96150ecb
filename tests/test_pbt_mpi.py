"""A real population-based training study under `mpiexec -n 3` (a coordinator and two
groups of one rank) on the tiny Keras model: it finishes with every round's lineage
recorded and shown, keeps one checkpoint per member, and after a kill -9 of the whole job
resumes: finished rounds are not run again, interrupted ones run again as the same round
of the same member, and the study reaches its budget."""
from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml

from conftest import BIN, mpiopt, subprocess_env
from test_chaos import _kill
from mpiopt.trial import TrialStatus

pytest.importorskip("tensorflow")

from test_training import write_case  # noqa: E402

TRIALS = 10


def _case(tmp_path, trials=TRIALS, interval=2):
    path = write_case(tmp_path, training={"batch_size": 16})
    spec = yaml.safe_load(path.read_text())
    spec["objective"]["model"] = "tiny.py:build_paced"   # paced where a job is killed
    spec["search"] = {"algorithm": "pbt", "trials": trials, "seed": 5,
                      "pbt": {"population": 3, "interval": interval, "explore": ["lr"],
                              "quantile": 0.34}}
    path.write_text(yaml.safe_dump(spec))
    return path


def _trials(url):
    from mpiopt.storage import open_storage

    with open_storage(url) as st:
        return st.get_trials(st.get_study("tiny").id)


def _check_lineage(trials, interval):
    by_number = {t.number: t for t in trials}
    for t in trials:
        assert t.member in (0, 1, 2) and t.round is not None
        if t.round == 0:
            assert t.parent is None
        else:
            parent = by_number[t.parent]
            assert parent.status is TrialStatus.COMPLETE and parent.round == t.round - 1
            if parent.member != t.member:          # exploited: the architecture is the donor's
                assert t.params["width"] == parent.params["width"]
            else:
                assert t.params == parent.params   # continued with its own parameters
            assert min(t.intermediate) == (0, t.round * interval)   # from where its parent ended
            assert max(t.intermediate) == (0, (t.round + 1) * interval)


def test_a_pbt_study_finishes_with_its_lineage_shown(tmp_path):
    spec = _case(tmp_path)
    url = f"sqlite:///{tmp_path / 'p.db'}"
    proc = mpiopt("search", spec, "--storage", url, np=3, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = _trials(url)
    assert len(trials) == TRIALS and all(t.status is TrialStatus.COMPLETE for t in trials)
    _check_lineage(trials, 2)
    assert {t.group for t in trials} == {0, 1}
    store = tmp_path / "p-artifacts" / "tiny" / "checkpoints"
    assert 1 <= len(list(store.iterdir())) <= 3          # about one per member, bounded
    later = next(t for t in trials if t.parent is not None)
    shown = mpiopt("show", "tiny", later.number, "--storage", url, check=True).stdout
    assert f"pbt: member {later.member}, round {later.round}," in shown
    listed = json.loads(mpiopt("trials", "tiny", "--storage", url, "--format", "json",
                               check=True).stdout)
    assert [(r["member"], r["round"], r["parent"]) for r in listed] == \
        [(t.member, t.round, t.parent) for t in trials]
    table = mpiopt("trials", "tiny", "--storage", url, check=True).stdout
    assert "member" in table.splitlines()[0] and "parent" in table.splitlines()[0]


def _finished(url) -> int:
    try:
        return sum(t.status is TrialStatus.COMPLETE for t in _trials(url))
    except Exception:
        return 0


def test_a_killed_pbt_study_resumes_without_rerunning_finished_rounds(tmp_path):
    spec = _case(tmp_path, trials=12, interval=3)
    url = f"sqlite:///{tmp_path / 'k.db'}"
    job = subprocess.Popen([str(BIN / "mpiexec"), "-n", "3", str(BIN / "mpiopt"), "search",
                            str(spec), "--storage", url], cwd=tmp_path,
                           env=dict(subprocess_env(), PACED="1"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    end = time.monotonic() + 180
    while _finished(url) < 4:
        assert job.poll() is None, "the job ended before the kill: make the study longer"
        assert time.monotonic() < end, "no round finished in time"
        time.sleep(0.1)
    _kill(job, "job")
    job.communicate(timeout=30)
    before = {t.number: t for t in _trials(url)}
    done = {n: t for n, t in before.items() if t.status is TrialStatus.COMPLETE}
    unfinished = {n: t for n, t in before.items() if t.status is TrialStatus.RUNNING}
    assert len(done) < 12

    proc = mpiopt("search", spec, "--storage", url, "--resume", np=3, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = _trials(url)
    assert len(after) == 12 and all(t.status is TrialStatus.COMPLETE for t in after)
    for n, t in done.items():               # never run again
        again = after[n]
        assert (again.attempt, again.value, again.finished_at) == (t.attempt, t.value, t.finished_at)
    for n, t in unfinished.items():         # the same round of the same member, run again
        again = after[n]
        assert again.attempt == t.attempt + 1
        assert (again.member, again.round, again.parent) == (t.member, t.round, t.parent)
    _check_lineage(after, 3)


def test_a_pbt_study_whose_rounds_all_fail_does_not_offer_retry_failed(tmp_path):
    """The closing line of a study whose trials all failed offers --retry-failed, which a
    pbt study refuses: it says what to do instead."""
    spec = _case(tmp_path, trials=4)
    model = tmp_path / "tiny.py"
    model.write_text(model.read_text().replace(
        "def build(params):", "def build(params):\n    raise ImportError('no module physics')", 1))
    url = f"sqlite:///{tmp_path / 'f.db'}"
    proc = mpiopt("search", spec, "--storage", url, cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    closing = [ln for ln in proc.stderr.splitlines() if ln.startswith("mpiopt:")]
    assert len(closing) == 1 and "all 4 trials failed" in closing[0], proc.stderr
    assert "--retry-failed" not in closing[0]
    assert closing[0].endswith(f"(mpiopt study delete tiny --storage {url})")
