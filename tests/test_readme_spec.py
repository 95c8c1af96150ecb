"""The spec reference's tables (docs/reference/spec.md) say what the reader does: the
fields each section accepts, with their declared type, default and doc line.

Two checks per section. The reader: every section is read by a `_Section` that refuses
unknown keys; the keys it was given while a spec with every section loads must be the
section's declared fields (mpiopt.spec.fields). The page: the table between the section's
markers must list the same fields with the same type, default and meaning. A difference
fails naming the field; `python -m mpiopt.spec.doc --write docs/reference/spec.md`
regenerates the tables from the declarations.
"""
from __future__ import annotations

import re

import pytest
import yaml

from conftest import ROOT
from mpiopt.spec.fields import SECTIONS, marked, markdown_table

PAGE = "docs/reference/spec.md"
PAGE_TEXT = (ROOT / PAGE).read_text(encoding="utf-8")
FIX = f"regenerate with: python -m mpiopt.spec.doc --write {PAGE}"

# every section present, so that each is read once
FULL_SPEC = {
    "study": {"name": "every-section"},
    "storage": {"url": "sqlite:///r.db"},
    "objective": {"model": "m.py:build", "data": {"loader": "m.py:load"},
                  "metric": "val_loss"},
    "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0},
                     "y": {"type": "real", "low": 0.0, "high": 1.0}},
    "search": {"algorithm": "random", "trials": 2,
               **{a: {} for a in ("bayesian", "tpe", "cmaes", "evolutionary", "random", "auto",
                                  "pbt")}},
    "training": {"epochs": 1, "early_stopping": {}, "pruning": {}},
    "resources": {"group_size": 1},
}
# the sections a loader's data section never reaches: read from ROOT files' data section
# (not opened: check_files=False); a collection's section is named by the collection
ROOT_DATA = {"root": "events.root", "features": ["jet_pt"],
             "collections": {"particles": {"branches": ["part_pt"], "length": 4}}}
PER_NAME = {"objective.data.collections."}
# the tables this test covered before the fields were declared: they must stay covered
COVERED = ("study", "storage", "objective", "objective.data", "search", "search.bayesian",
           "search.evolutionary", "training", "resources")


@pytest.fixture(scope="module")
def accepted(tmp_path_factory) -> dict[str, tuple]:
    """{dotted section: the keys its _Section accepted} while FULL_SPEC loads."""
    from mpiopt import spec as spec_module

    seen: dict[str, tuple] = {}
    original = spec_module._Section.__init__

    def recording(self, data, source, path, keys, what="a mapping"):
        named = [p for p in PER_NAME if path.startswith(p)]
        seen[named[0][:-1] if named else path] = tuple(keys)
        original(self, data, source, path, keys, what)

    tmp = tmp_path_factory.mktemp("full")
    (tmp / "m.py").write_text("def build(p):\n    pass\n\ndef load():\n    pass\n")
    (tmp / "spec.yaml").write_text(yaml.safe_dump(FULL_SPEC))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spec_module._Section, "__init__", recording)
        spec_module.load_spec(tmp / "spec.yaml")
        root = {**FULL_SPEC, "objective": {**FULL_SPEC["objective"], "data": ROOT_DATA}}
        spec_module.Spec.from_dict(root, base_dir=tmp, check_files=False)
    return seen


def documented(section: str) -> dict[str, tuple[str, str, str]]:
    """{field: (type, default, meaning)} from the page's table between the section's markers."""
    body = marked(PAGE_TEXT).get(section)
    assert body is not None, f"{PAGE} has no <!-- fields: {section} --> table; {FIX}"
    rows = [line for line in body.splitlines() if line.startswith("|")][2:]  # past header, rule
    out = {}
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
        assert len(cells) == 4, f"{PAGE}'s {section} table: a row without 4 cells: {row}"
        for name in re.findall(r"`([a-z_0-9]+)`", cells[0]):
            out[name] = tuple(cells[1:])
    return out


def test_every_table_this_test_covered_is_still_declared():
    assert set(COVERED) <= set(SECTIONS)


@pytest.mark.parametrize("section", SECTIONS)
def test_the_reader_accepts_exactly_the_declared_fields(accepted, section):
    assert section in accepted, f"the reader never read {section}: {sorted(accepted)}"
    assert accepted[section] == SECTIONS[section].names


@pytest.mark.parametrize("section", SECTIONS)
def test_reference_table_matches_the_declared_fields(section):
    rows = documented(section)
    declared = {f.name: f for f in SECTIONS[section]}
    missing, extra = declared.keys() - rows.keys(), rows.keys() - declared.keys()
    assert not missing, f"{PAGE}'s {section} table lacks {sorted(missing)}; {FIX}"
    assert not extra, f"{PAGE}'s {section} table lists {sorted(extra)}, which {section} refuses"
    differ = []
    for name, field in declared.items():
        kind, default, doc = rows[name]
        for what, theirs, ours in (("default", default, field.default_cell()),
                                   ("meaning", doc, field.doc), ("type", kind, field.type_cell())):
            if theirs != ours:
                differ.append(f"{PAGE}'s {section}.{name}: {what} {theirs!r}, declared {ours!r}")
    assert not differ, "\n".join(differ + [FIX])
    assert marked(PAGE_TEXT)[section] == markdown_table(section), \
        f"{PAGE}'s {section} table is not in its generated form (order, rows); {FIX}"


def test_reference_marks_no_unknown_section():
    unknown = set(marked(PAGE_TEXT)) - set(SECTIONS)
    assert not unknown, f"{PAGE} marks tables of sections that do not exist: {sorted(unknown)}"
