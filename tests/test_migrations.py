"""Migrations: they build exactly the models' schema, upgrade old databases on open and
by `mpiopt db upgrade`, and ship inside the wheel (found without the source tree)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, Table, inspect, text

from mpiopt.cli.main import main
from mpiopt.errors import StorageError
from mpiopt.storage import migrate, open_storage
from mpiopt.storage._engine import make_engine
from mpiopt.storage.models import Base
from mpiopt.trial import TrialStatus

ROOT = Path(__file__).resolve().parent.parent
TABLES = {"studies", "jobs", "trials", "trial_params", "trial_folds", "trial_intermediate",
          "alembic_version"}


def _diff(engine, metadata=Base.metadata) -> list:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True,
                                                     "render_as_batch": True})
        return compare_metadata(ctx, metadata)


@pytest.fixture
def fresh(tmp_path):
    st = open_storage(f"sqlite:///{tmp_path / 'r.db'}", create=True)
    yield st
    st.close()


def test_fresh_database_is_built_by_the_migrations(fresh):
    assert set(inspect(fresh.engine).get_table_names()) == TABLES
    assert migrate.current_revision(fresh.engine) == migrate.head_revision() == SHIPPED_HEAD


def test_the_scripts_are_one_numbered_line_as_the_head_is_read_without_alembic():
    """migrate reads the head from the file names (alembic is not imported to open a
    database): each script's revision is its file's number, after the one before it."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(migrate.make_config())
    chain = list(reversed(list(scripts.walk_revisions())))
    assert [s.revision for s in chain] == [Path(s.path).name[:4] for s in chain]
    assert [s.down_revision for s in chain] == [None] + [s.revision for s in chain[:-1]]
    assert migrate.head_revision() == scripts.get_current_head() == SHIPPED_HEAD
    probe = subprocess.run([sys.executable, "-c", "import sys\nfrom mpiopt.storage import "
                            "open_storage\nprint('alembic' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "False"


def test_autogenerate_finds_no_difference_between_migrations_and_models(fresh):
    assert _diff(fresh.engine) == []


def test_the_comparison_would_notice_a_difference(fresh):
    """Guards the test above against passing vacuously."""
    meta = MetaData()
    for table in Base.metadata.sorted_tables:
        table.to_metadata(meta)
    Table("extra", meta, Column("id", Integer, primary_key=True))
    meta.tables["studies"].append_column(Column("note", Integer))
    kinds = {d[0] if isinstance(d, tuple) else d[0][0] for d in _diff(fresh.engine, meta)}
    assert {"add_table", "add_column"} <= kinds


def test_alembic_dir_never_shadows_the_library():
    assert not list((ROOT / "alembic").rglob("__init__.py"))
    out = subprocess.run([sys.executable, "-c", "import alembic.command as c; print(c.__file__)"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert Path(out.strip()).is_relative_to(Path(__import__("alembic").__file__).parent)


def test_scripts_are_found_from_a_checkout():
    assert migrate.script_location() in (ROOT / "alembic", ROOT / "mpiopt" / "_alembic")
    assert (migrate.script_location() / "env.py").is_file()


# ---- upgrading an existing database ----------------------------------------------------
# The newest shipped revision; a later release's hypothetical one follows it.
SHIPPED_HEAD = sorted(p.name[:4] for p in (ROOT / "alembic" / "versions").glob("0*.py"))[-1]
LATER = f"{int(SHIPPED_HEAD) + 1:04d}"
NEXT = f'''
from alembic import op
import sqlalchemy as sa

revision = "{LATER}"
down_revision = "{SHIPPED_HEAD}"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("note", sa.Text(), nullable=True))


def downgrade():
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("note")
'''


@pytest.fixture
def newer_scripts(tmp_path, monkeypatch):
    """The shipped scripts plus a hypothetical later revision, as a later release would be."""
    scripts = tmp_path / "scripts"
    shutil.copytree(migrate.script_location(), scripts,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "versions" / f"{LATER}_note.py").write_text(NEXT)
    monkeypatch.setattr(migrate, "script_location", lambda: scripts)
    return scripts


def _old_database(tmp_path) -> str:
    """A database at revision 0001 holding one study."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine, "0001")
    with engine.begin() as conn:          # as the mpiopt of revision 0001 wrote it
        conn.execute(text(
            "insert into studies (name, direction, metric, spec_text, fingerprint, space_json, "
            "status, created_at, updated_at) values ('kept', 'minimize', 'value', 's', :fp, "
            "'{}', 'RUNNING', '2026-11-22 10:00:00', '2026-11-22 10:00:00')"), {"fp": "0" * 64})
    engine.dispose()
    return url


def test_opening_an_old_database_upgrades_it_and_keeps_its_data(tmp_path, newer_scripts):
    url = _old_database(tmp_path)
    with open_storage(url) as st:
        assert migrate.current_revision(st.engine) == LATER
        assert "note" in {c["name"] for c in inspect(st.engine).get_columns("studies")}
        assert st.get_study("kept").name == "kept"


def test_db_current_and_db_upgrade(tmp_path, newer_scripts, capsys):
    url = _old_database(tmp_path)
    assert main(["db", "current", "--storage", url]) == 0
    assert capsys.readouterr().out.strip() == f"0001 (head is {LATER}: run `mpiopt db upgrade`)"
    assert main(["db", "upgrade", "--storage", url]) == 0
    assert f"0001 -> {LATER}" in capsys.readouterr().out
    assert main(["db", "current", "--storage", url]) == 0
    assert capsys.readouterr().out.strip() == f"{LATER} (head)"


def test_a_database_from_a_newer_mpiopt_is_refused(tmp_path):
    url = _old_database(tmp_path)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("update alembic_version set version_num = '0099'"))
    engine.dispose()
    with pytest.raises(StorageError, match="0099.*newer mpiopt"):
        open_storage(url)


def test_db_commands_never_create_a_file(tmp_path, capsys):
    path = tmp_path / "missing.db"
    for action in ("current", "upgrade"):
        assert main(["db", action, "--storage", f"sqlite:///{path}"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "missing.db" in err
    assert not path.exists()


# ---- the wheel -------------------------------------------------------------------------
CHECK = textwrap.dedent("""
    import sys
    from pathlib import Path
    import mpiopt
    from mpiopt.storage import Storage, migrate, open_storage
    site = Path(sys.argv[1]).resolve()
    assert Path(mpiopt.__file__).resolve().is_relative_to(site), mpiopt.__file__
    assert migrate.script_location().resolve() == site / "mpiopt" / "_alembic"
    with open_storage("sqlite:///fresh.db", create=True) as st:
        st.create_study("w", "minimize", "value", "s", "0" * 64, "{}")
        print(migrate.current_revision(st.engine), [s.name for s in st.list_studies()])
""")


def _source_copy(dest: Path) -> Path:
    """Only what a build needs, so the build never touches the shared checkout."""
    for name in ("mpiopt", "alembic", "searchspaces"):
        shutil.copytree(ROOT / name, dest / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, dest / name)
    return dest


def test_installed_wheel_finds_its_migrations(tmp_path):
    """Slow-ish (a wheel build, ~5 s) but offline: no build isolation, no index."""
    src = _source_copy(tmp_path / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "--no-index", "-w", str(tmp_path / "dist"), "."],
                   cwd=src, check=True, capture_output=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("mpiopt-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {"mpiopt/_alembic/env.py", "mpiopt/_alembic/script.py.mako",
            "mpiopt/_alembic/versions/0001_initial.py"} <= set(names)
    assert not [n for n in names if n.startswith("alembic/")]
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", CHECK, str(site)], cwd=elsewhere, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{SHIPPED_HEAD} ['w']"
    assert (elsewhere / "fresh.db").is_file()


def test_0006_adds_the_lineage_columns_and_keeps_the_trials(tmp_path):
    """A 0005 database's trials survive 0006 with no lineage (NULL); new ones record it."""
    url = f"sqlite:///{tmp_path / 'five.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine, "0005")
    with engine.begin() as conn:          # as the mpiopt of revision 0005 wrote it
        conn.execute(text(
            "insert into studies (name, direction, metric, spec_text, fingerprint, space_json, "
            "status, created_at, updated_at) values ('old', 'minimize', 'value', 's', :fp, "
            "'{}', 'RUNNING', '2026-11-22 10:00:00', '2026-11-22 10:00:00')"), {"fp": "0" * 64})
        conn.execute(text("insert into trials (study_id, number, status, value, attempt, "
                          "lost_attempts) values (1, 0, 'COMPLETE', 0.5, 0, 0)"))
    engine.dispose()
    with open_storage(url) as st:
        assert migrate.current_revision(st.engine) == migrate.head_revision()
        assert {"member", "round", "parent"} <= {c["name"] for c in inspect(st.engine).get_columns("trials")}
        old = st.get_trials(1)[0]
        assert (old.value, old.member, old.round, old.parent) == (0.5, None, None, None)
        new = st.create_trials(1, [dict(params={}, seed=1, group=0, member=2, round=3, parent=0)])[0]
        assert (new.member, new.round, new.parent) == (2, 3, 0)
        assert st.get_trials(1)[1].parent == 0
        done = st.finish_trials([dict(trial_id=new.id, status="COMPLETE", value=0.1)])[0]
        assert (done.member, done.round, done.parent) == (2, 3, 0)


def test_0009_makes_the_study_leases_jobs_and_keeps_the_trials(db_url):
    """A 0008 database (one live lease, one released, trials), on SQLite and PostgreSQL:
    its studies and trials survive 0009 whole (the batch copy of `studies` once cascaded
    into `trials` on SQLite), the live lease is a live exclusive job, the released one an
    ended job, and the schema is the models'."""
    url = db_url
    engine = make_engine(url)
    migrate.upgrade(engine, "0008")
    with engine.begin() as conn:          # as the mpiopt of revision 0008 wrote it
        for name, token in (("live", "t" * 32), ("done", None)):
            conn.execute(text(
                "insert into studies (name, direction, metric, spec_text, fingerprint, "
                "space_json, status, created_at, updated_at, lease_token, lease_host, "
                "lease_pid, lease_started_at, lease_beat_at, lease_period) values (:n, "
                "'minimize', 'value', 's', :fp, '{}', 'RUNNING', '2026-11-22 10:00:00', "
                "'2026-11-22 10:00:00', :tok, 'n12', 4242, '2026-11-22 10:00:00', "
                "'2026-11-22 10:05:00', 30.0)"), {"n": name, "fp": "0" * 64, "tok": token})
        conn.execute(text("insert into trials (study_id, number, status, value, attempt, "
                          "lost_attempts) values (1, 0, 'RUNNING', NULL, 0, 0), "
                          "(2, 0, 'COMPLETE', 0.5, 0, 0)"))
    engine.dispose()
    with open_storage(url) as st:
        assert _diff(st.engine) == []
        assert [t.status for t in st.get_trials(1)] == [TrialStatus.RUNNING]
        assert [(t.value, t.job) for t in st.get_trials(2)] == [(0.5, None)]
        live, done = st.list_jobs(1), st.list_jobs(2)
        assert [(j.host, j.pid, j.live, j.shared, j.period_s) for j in live] == \
            [("n12", 4242, True, False, 30.0)]
        assert [(j.end, j.ended_at == j.beat_at) for j in done] == [("ended", True)]
        assert st.get_study("live").lease == live[0] and st.get_study("done").lease == done[0]
        assert "lease_token" not in {c["name"] for c in inspect(st.engine).get_columns("studies")}


def _study_row(conn, name: str, spec_text: str) -> int:
    conn.execute(text(
        "insert into studies (name, direction, metric, spec_text, fingerprint, space_json, "
        "status, created_at, updated_at) values (:n, 'maximize', 'val_accuracy', :s, :fp, "
        "'{}', 'COMPLETE', '2026-11-22 10:00:00', '2026-11-22 10:00:00')"),
        {"n": name, "s": spec_text, "fp": "0" * 64})
    return conn.execute(text("select id from studies where name = :n"), {"n": name}).scalar()


def _trial_row(conn, study_id: int, number: int, steps: range, epochs: int | None = None) -> int:
    conn.execute(text("insert into trials (study_id, number, status, value, attempt, "
                      "lost_attempts) values (:s, :n, 'PRUNED', 0.5, 0, 0)"),
                 {"s": study_id, "n": number})
    tid = conn.execute(text("select max(id) from trials")).scalar()
    if epochs is not None:            # training.epochs searched: the trial's own epochs
        conn.execute(text("insert into trial_params (trial_id, name, kind, value_float, "
                          "value_text) values (:t, 'training.epochs', 'int', :e, :x)"),
                     {"t": tid, "e": float(epochs), "x": str(epochs)})
    for step in steps:
        conn.execute(text("insert into trial_intermediate (trial_id, epoch, value) "
                          "values (:t, :e, :v)"), {"t": tid, "e": step, "v": step / 100})
    return tid


KERAS = ("objective: {model: m.py:build, metric: val_accuracy, direction: maximize}\n"
         "training: {epochs: 3, kfold: 3}\nresources: {group_size: %d}\n")


def test_0011_reads_the_old_steps_back_into_folds_and_epochs(db_url):
    """Issue 62: a 0010 database (steps fold * epochs + epoch) on SQLite and PostgreSQL:
    a Keras study whose 3 folds ran one after another gets each value's fold and epoch,
    with the trial's own epochs where training.epochs was searched; folds side by side
    (their per-epoch mean), a function objective's epochs and one fold stay fold 0."""
    engine = make_engine(db_url)
    migrate.upgrade(engine, "0010")
    with engine.begin() as conn:          # as the mpiopt of revision 0010 wrote them
        turn = _study_row(conn, "in-turn", KERAS % 2)
        fixed = _trial_row(conn, turn, 0, range(1, 9))          # pruned at fold 2 epoch 2
        searched = _trial_row(conn, turn, 1, range(1, 6), epochs=2)
        side = _study_row(conn, "side-by-side", KERAS % 3)
        mean = _trial_row(conn, side, 0, range(1, 4))
        plain = _study_row(conn, "function", "objective: {function: f.py:f}\n"
                                             "training: {epochs: 3, kfold: 3}\n")
        own = _trial_row(conn, plain, 0, range(0, 12))
    engine.dispose()
    with open_storage(db_url) as st:
        assert _diff(st.engine) == []
        got = {t.id: t.intermediate for s in (turn, side, plain) for t in st.get_trials(s)}
    assert list(got[fixed]) == [(f, e) for f in range(3) for e in (1, 2, 3)][:8]
    assert got[fixed][(2, 2)] == 0.08 and got[fixed][(1, 1)] == 0.04
    assert list(got[searched]) == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1)]
    assert list(got[mean]) == [(0, 1), (0, 2), (0, 3)]
    assert list(got[own]) == [(0, e) for e in range(12)]
