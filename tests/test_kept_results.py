"""mpiopt/kept.py alone: what a leader keeps before a result leaves, how small its
file stays, where it goes when a folder refuses it, and that a resume's import writes it
once (tests/test_chaos.py kills a real job in the window this closes)."""
from __future__ import annotations


import yaml
from conftest import ROOT, mpiopt

from mpiopt.kept import (KEEP_LAST, REWRITE_EVERY, KeptResults, group_file, group_files,
                               read_line)
from mpiopt.parallel.protocol import Result
from mpiopt.storage import open_storage
from mpiopt.storage.recovery import import_recovery
from mpiopt.trial import TrialStatus


def kept_ids(path) -> list[int]:
    return [read_line(line)["trial_id"] for line in path.read_text().splitlines()]


def test_finished_results_are_kept_and_a_resume_writes_each_once(tmp_path, db_url):
    with open_storage(db_url, create=True) as st:
        sid = st.create_study("s", "minimize", "value", "s", "0" * 64, "{}")
        a, b = (st.create_trial(sid, {"x": x}, seed=0, group=0) for x in (1.0, 2.0))
        place = tmp_path / "s.mpiopt-recovery.jsonl"
        keeper = KeptResults([place], st.location.key, rank=3)
        keeper.keep(Result(a.id, TrialStatus.COMPLETE, value=3.0, fold_values=[2.0, 4.0],
                           metrics={"acc": 0.9}, duration=1.5))
        keeper.keep(Result(b.id, TrialStatus.FAILED, error="ValueError: bad"))
        st.finish_trial(b.id, TrialStatus.FAILED, error="ValueError: bad")   # written after all
        [path] = group_files(place, st.location.key)
        assert path == group_file(place, st.location.key, 3) and kept_ids(path) == [a.id, b.id]
        assert import_recovery(st, path, sid) == 1 and not path.exists()
        got = {t.number: t for t in st.get_trials(sid)}
        assert got[0].status is TrialStatus.COMPLETE and got[0].value == 3.0
        assert got[0].fold_values == [2.0, 4.0] and got[0].metrics == {"acc": 0.9}
        assert got[1].status is TrialStatus.FAILED


def test_cancelled_trials_and_refits_are_not_kept(tmp_path):
    keeper = KeptResults([tmp_path / "s.mpiopt-recovery.jsonl"], "k", rank=1)
    keeper.keep(Result(5, TrialStatus.INTERRUPTED, error="cancelled: the job is ending"))
    keeper.keep(Result(-1, TrialStatus.COMPLETE, value=1.0))        # training.refit: no row
    assert not list(tmp_path.iterdir())


def test_the_file_stays_small_and_always_holds_the_last_results(tmp_path):
    keeper = KeptResults([tmp_path / "s.mpiopt-recovery.jsonl"], "k", rank=1)
    path = group_file(tmp_path / "s.mpiopt-recovery.jsonl", "k", 1)
    for trial_id in range(1, 5 * REWRITE_EVERY + 3):
        keeper.keep(Result(trial_id, TrialStatus.COMPLETE, value=float(trial_id)))
        ids = kept_ids(path)
        assert len(ids) < KEEP_LAST + REWRITE_EVERY
        assert ids[-KEEP_LAST:] == list(range(max(1, trial_id - KEEP_LAST + 1), trial_id + 1))
    assert [p.name for p in path.parent.iterdir()] == [path.name]   # (no temporary left)
    keeper.discard()
    assert not list(tmp_path.iterdir())                # (nor the folder, once empty)


def test_a_folder_that_refuses_the_file_gives_way_to_the_next(tmp_path):
    (tmp_path / "spec-folder").write_text("")            # no folder can be made there
    first = tmp_path / "spec-folder" / "s.mpiopt-recovery.jsonl"
    second = tmp_path / "home" / "s.mpiopt-recovery.jsonl"
    keeper = KeptResults([first, second], "k", rank=2)
    for trial_id in range(1, REWRITE_EVERY + 2):          # (a rewrite among them)
        keeper.keep(Result(trial_id, TrialStatus.COMPLETE, value=1.0))
    assert kept_ids(group_file(second, "k", 2))[-1] == REWRITE_EVERY + 1
    nowhere = KeptResults([first], "k", rank=2)
    nowhere.keep(Result(1, TrialStatus.COMPLETE, value=1.0))        # never raises
    nowhere.discard()


def test_each_database_finds_only_its_own_files(tmp_path):
    place = tmp_path / "s.mpiopt-recovery.jsonl"
    for key, rank in (("aaa", 1), ("aaa", 2), ("bbb", 1)):
        KeptResults([place], key, rank).keep(Result(rank, TrialStatus.COMPLETE, value=1.0))
    assert [str(p.relative_to(tmp_path)) for p in group_files(place, "aaa")] == \
        ["s.mpiopt-kept/aaa.rank1.jsonl", "s.mpiopt-kept/aaa.rank2.jsonl"]
    assert group_files(tmp_path / "t.mpiopt-recovery.jsonl", "aaa") == []   # another study


def test_a_new_study_forgets_what_was_kept_for_a_deleted_one_of_its_name(tmp_path):
    """A job killed leaves its leaders' files; the study deleted and made again under the
    same name in the same database, its trials may get the old trial ids (SQLite gives a
    deleted row's id again), and a resume imported the old results into them. A new
    study's start removes such files; a resume still imports its own."""
    spec = tmp_path / "k.yaml"
    spec.write_text(yaml.safe_dump({
        "study": {"name": "k"},
        "objective": {"function": f"{ROOT / 'tests' / 'objectives' / 'functions.py'}:branin",
                      "direction": "minimize"},
        "search_space": {"x": {"type": "real", "low": -5.0, "high": 10.0},
                         "y": {"type": "real", "low": 0.0, "high": 15.0}},
        "search": {"algorithm": "random", "trials": 3, "seed": 1}}))
    url = f"sqlite:///{tmp_path / 'k.db'}"
    mpiopt("search", spec, "--storage", url, cwd=tmp_path, check=True)
    mpiopt("study", "delete", "k", "--yes", "--storage", url, cwd=tmp_path, check=True)
    place = tmp_path / "k.mpiopt-recovery.jsonl"
    with open_storage(url) as st:
        key = st.location.key
    stale = KeptResults([place], key, rank=1)
    stale.keep(Result(1, TrialStatus.COMPLETE, value=-123.0))     # the deleted study's trial 1
    mpiopt("search", spec, "--storage", url, cwd=tmp_path, check=True)
    assert group_files(place, key) == [] and not (tmp_path / "k.mpiopt-kept").exists()
    with open_storage(url) as st:
        assert all(t.value != -123.0 for t in st.get_trials(st.get_study("k").id))
