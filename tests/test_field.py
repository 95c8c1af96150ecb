"""mpiopt.field (a setting declared once) and the spec reference generator mpiopt.spec.doc."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from conftest import ROOT
from mpiopt.errors import SpecError
from mpiopt.field import REQUIRED, Field, Fields
from mpiopt.spec import (DataSpec, EarlyStoppingSpec, PruningSpec, ResourcesSpec, SearchSpec,
                         StudySpec, TrainingSpec, _Section)
from mpiopt.spec.fields import SECTIONS, markdown_table, rewrite


def section(data: dict, fields: Fields) -> _Section:
    return _Section(data, "spec.yaml", "training", fields.names)


def test_a_field_reads_checks_and_names_itself():
    fields = Fields(Field("epochs", 10, "integer", "Epochs.", low=1),
                    Field("alpha", 0.5, "number", "Strength.", low=0.0, high=1.0, open_low=True),
                    Field("limit", None, "duration", "A time."),
                    Field("mode", "a", "text", "Mode.", choices=("a", "b")))
    assert fields.read(section({}, fields)) == {"epochs": 10, "alpha": 0.5, "limit": None, "mode": "a"}
    assert fields.read(section({"limit": "1h30m", "alpha": 1}, fields))["limit"] == 5400.0
    with pytest.raises(SpecError, match=r"^spec.yaml: training.epochs: must be at least 1, got 0$"):
        fields.read(section({"epochs": 0}, fields))
    with pytest.raises(SpecError, match=r"training.alpha: must be in \(0.0, 1.0\], got 0"):
        fields.read(section({"alpha": 0}, fields))


def test_a_structured_field_is_left_to_its_section():
    with pytest.raises(TypeError, match="its section's code reads it"):
        Field("data", None, "mapping", "Data.").read(section({}, Fields()))
    with pytest.raises(ValueError, match="unknown kind"):
        Field("x", 1, "float", "No such kind.")


@pytest.mark.parametrize("field,kind,default", [
    (Field("n", REQUIRED, "integer", "", low=1), "integer ≥ 1", "required"),
    (Field("h", 0.2, "number", "", low=0.0, high=1.0, open_low=True, open_high=True),
     "number in (0, 1)", "`0.2`"),
    (Field("g", 300.0, "duration", ""), "duration", "`5m`"),
    (Field("t", None, "number", ""), "number", "`null`"),
    (Field("f", True, "flag", ""), "boolean", "`true`"),
    (Field("d", "", "text", ""), "string", '`""`'),
    (Field("m", "x", "text", "", choices=("x", "y", "z")), "`x`, `y` or `z`", "`x`"),
    (Field("l", [], "list", ""), "list", "`[]`"),
    (Field("r", None, "ref", "", shown="–"), "`file.py:name`", "–"),
])
def test_readme_cells(field, kind, default):
    assert (field.type_cell(), field.default_cell()) == (kind, default)


@pytest.mark.parametrize("spec_class,section", [
    (StudySpec, "study"), (DataSpec, "objective.data"), (SearchSpec, "search"),
    (TrainingSpec, "training"), (EarlyStoppingSpec, "training.early_stopping"),
    (PruningSpec, "training.pruning"), (ResourcesSpec, "resources")])
def test_the_dataclasses_defaults_are_the_declared_ones(spec_class, section):
    """The frozen dataclasses keep defaults for code that builds them directly; they must
    not drift from the declarations the reader uses."""
    declared = {f.name: f.default for f in SECTIONS[section] if f.plain}
    own = {f.name: f.default for f in dataclasses.fields(spec_class)
           if f.name in declared and f.default is not dataclasses.MISSING}
    assert own and own == {name: declared[name] for name in own}


def test_rows_with_the_same_cells_are_merged():
    assert "| `val_npz`, `val_npy`, `val_hdf5`, `val_root` | path or list of paths | `[]` |" \
        in markdown_table("objective.data")
    assert markdown_table("search.auto") == "`search.auto` takes no options.\n"


def test_rewrite_regenerates_a_stale_table_and_keeps_the_rest():
    stale = "Intro.\n\n<!-- fields: resources -->\n| old |\n<!-- end fields -->\n\nAfter.\n"
    fresh = rewrite(stale)
    assert fresh.startswith("Intro.\n\n<!-- fields: resources -->\n\n| field | type |")
    assert "| `group_size` | integer ≥ 1 | `1` |" in fresh and fresh.endswith("<!-- end fields -->\n\nAfter.\n")
    assert rewrite(fresh) == fresh
    with pytest.raises(KeyError, match="unknown spec section 'nope'"):
        rewrite("<!-- fields: nope -->\n<!-- end fields -->")


def doc(*args):
    return subprocess.run([sys.executable, "-m", "mpiopt.spec.doc", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_the_doc_command_prints_and_checks_the_tables(tmp_path):
    proc = doc("resources")
    assert proc.returncode == 0 and proc.stdout.startswith("`resources`:\n\n| field |")
    assert doc("--check", "docs/reference/spec.md").returncode == 0
    copy = tmp_path / "spec.md"
    copy.write_text("<!-- fields: study -->\n<!-- end fields -->\n")
    assert doc("--check", str(copy)).returncode == 1
    assert doc("--write", str(copy)).returncode == 0 and "| `name` | string | required |" in copy.read_text()
    proc = doc("nope")
    assert proc.returncode == 2 and "unknown section 'nope'" in proc.stderr
