"""StorageURL (mpiopt/storage/_urls.py): one parse of a database URL for its path, its
shown form, its key and its default, the same for the commands and the Python API."""
from __future__ import annotations

from pathlib import Path

import pytest

import mpiopt
from mpiopt.errors import StorageError
from mpiopt.storage import StorageURL, open_storage


def test_a_server_url_is_shown_without_its_password_and_has_no_path():
    url = StorageURL.parse("postgresql+psycopg://me:secret@db:5432/hpo")
    assert url.shown == "postgresql+psycopg://me:***@db:5432/hpo" and "secret" not in url.where()
    assert url.backend == "postgresql" and url.sqlite_path is None
    assert url.key == StorageURL.parse("postgresql://me@db:5432/hpo").key      # one database
    assert url.key != StorageURL.parse("postgresql://me@db:5432/hpo2").key


def test_sqlite_paths_and_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert StorageURL.parse("sqlite:///r.db").sqlite_path == Path("r.db")
    assert StorageURL.parse("sqlite:///~/r.db").sqlite_path == tmp_path / "home" / "r.db"
    keys = {StorageURL.parse(u).key for u in ("sqlite:///r.db", f"sqlite:///{tmp_path}/r.db",
                                              f"sqlite+pysqlite:///{tmp_path}/x/../r.db")}
    assert len(keys) == 1
    for memory in ("sqlite://", "sqlite:///:memory:"):
        assert StorageURL.parse(memory).sqlite_path is None


def test_the_default_is_the_given_url_then_the_environment_then_the_spec_then_mpiopt_db(
        tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("MPIOPT_STORAGE", raising=False)
    assert StorageURL.default().text == "sqlite:///mpiopt.db"
    assert StorageURL.default(None, "sqlite:///spec.db").text == "sqlite:///spec.db"
    monkeypatch.setenv("MPIOPT_STORAGE", "sqlite:///~/env.db")
    assert StorageURL.default(None, "sqlite:///spec.db").text == f"sqlite:///{tmp_path}/env.db"
    assert StorageURL.default("sqlite:///given.db").text == "sqlite:///given.db"


def test_the_apis_default_expands_the_home_folder_as_the_commands_do(tmp_path, monkeypatch):
    """load_study() without a URL took $MPIOPT_STORAGE's ~ literally, and found no database
    where `mpiopt studies` found one."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with open_storage(f"sqlite:///{tmp_path / 'r.db'}", create=True) as st:
        st.create_study("s", "minimize", "value", "study: {name: s}", "0" * 64, "{}")
    monkeypatch.setenv("MPIOPT_STORAGE", "sqlite:///~/r.db")
    study = mpiopt.load_study("s")
    try:
        assert study.name == "s"
    finally:
        study.close()


@pytest.mark.parametrize("url, message", [
    ("not a url", "not a database URL"),
    ("mysql://me:pw@db/x", "MySQL/MariaDB is not supported"),
    ("oracle://me:pw@db/x", "the 'oracle' database is not supported"),
    ("postgresql+nodriver://me:pw@db/x", "driver 'nodriver' is not installed"),
])
def test_check_refuses_a_url_that_cannot_work_in_one_line_without_the_password(url, message):
    with pytest.raises(StorageError, match=message) as caught:
        StorageURL.parse(url).check()
    assert "pw" not in str(caught.value) and "\n" not in str(caught.value)
