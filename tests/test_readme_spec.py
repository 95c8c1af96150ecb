"""The README's spec tables list exactly the fields the spec reader accepts.

Every section of the spec is read by a `_Section` that refuses unknown keys; this test
records the keys each one accepts while a spec with every section is loaded, and compares
them with the first column of the README table under that section's heading. A field
added to the reader and not to the README (or the other way round) fails here, naming it.
"""
from __future__ import annotations

import re

import pytest
import yaml

from conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")

# every section present, so that each is read once
FULL_SPEC = {
    "study": {"name": "every-section"},
    "storage": {"url": "sqlite:///r.db"},
    "objective": {"model": "m.py:build", "data": {"loader": "m.py:load"},
                  "metric": "val_loss"},
    "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0},
                     "y": {"type": "real", "low": 0.0, "high": 1.0}},
    "search": {"algorithm": "random", "trials": 2,
               **{a: {} for a in ("bayesian", "tpe", "cmaes", "evolutionary", "random", "auto")}},
    "training": {"epochs": 1},
    "resources": {"group_size": 1},
}
TABLES = {  # README table heading -> the spec section it documents
    "### `study`": "study", "### `storage`": "storage", "### `objective`": "objective",
    "`objective.data` (with `model`)": "objective.data", "### `search`": "search",
    "`search.bayesian`:": "search.bayesian", "`search.evolutionary`:": "search.evolutionary",
    "### `training`": "training", "### `resources`": "resources",
}


def accepted_keys(tmp_path, monkeypatch) -> dict[str, set]:
    from mpiopt import spec as spec_module

    seen: dict[str, set] = {}
    original = spec_module._Section.__init__

    def recording(self, data, source, path, keys, what="a mapping"):
        seen.setdefault(path, set()).update(keys)
        original(self, data, source, path, keys, what)

    monkeypatch.setattr(spec_module._Section, "__init__", recording)
    (tmp_path / "m.py").write_text("def build(p):\n    pass\n\ndef load():\n    pass\n")
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(FULL_SPEC))
    spec_module.load_spec(path)
    return seen


def documented_keys(heading: str) -> set:
    """The backquoted names in the first column of the first table after `heading`."""
    start = README.index(heading)
    rows = []
    for line in README[start:].splitlines()[1:]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    names = set()
    for row in rows[2:]:                                  # past the header and the rule
        names.update(re.findall(r"`([a-z_0-9]+)`", row.split("|")[1]))
    return names


@pytest.mark.parametrize("heading,section", TABLES.items())
def test_readme_table_lists_exactly_the_accepted_fields(tmp_path, monkeypatch, heading, section):
    accepted = accepted_keys(tmp_path, monkeypatch)
    assert section in accepted, f"the reader never read {section}: {sorted(accepted)}"
    documented = documented_keys(heading)
    missing, extra = accepted[section] - documented, documented - accepted[section]
    assert not missing, f"README's {heading} table lacks {sorted(missing)}"
    assert not extra, f"README's {heading} table lists {sorted(extra)}, which {section} refuses"
