"""The spec stored with a study, read back: the one reader of `StudyRecord.spec_text`.

A study keeps its resolved spec as YAML (mpiopt.study.opening.spec_text), and many
readers want something of it: a resume its whole, `mpiopt status` its budget and
algorithm, the query commands its objectives. They all read it here, through `stored()`,
so that the text is parsed one way (the spec's own YAML reader, aliases bounded) and
what a text that is not a whole spec of this version gives is decided once:

- `spec`: the typed Spec (files not checked: a study whose files moved is still shown
  and resumed), or None where the text does not make one (a spec stored by another
  version of mpiopt, a database written by hand);
- `get(section, key)` and `section(name)`: one field or one section of the text as
  written, None or {} where it has none: what a note (a budget, an algorithm's advice)
  shows even of a spec that no longer makes a Spec;
- `data`: the whole mapping, for a reader that edits it (a resume's overrides, a
  rename); a text that is not a YAML mapping is a SpecError naming "<stored>".

    >>> stored("study: {name: s}\\nsearch: {trials: 10}\\n").get("search", "trials")
    10
"""
from __future__ import annotations

from functools import cached_property
from typing import Any

from mpiopt.errors import SpecError
from mpiopt.spec._reader import _parse_yaml

SOURCE = "<stored>"


class StoredSpec:
    """One study's stored spec text, parsed at most once (see the module docstring)."""

    def __init__(self, text: str | None):
        self.text = text or ""

    @cached_property
    def _parsed(self) -> Any:
        return _parse_yaml(self.text, SOURCE) if self.text.strip() else {}

    @property
    def data(self) -> dict:
        """The whole mapping as its study ran (fields absent from it read with the
        defaults they had when it was stored: spec._resolved.stored_as_it_ran), a copy
        the caller may change; SpecError when it is none."""
        import copy

        from mpiopt.spec._resolved import stored_as_it_ran

        parsed = self._parsed
        if not isinstance(parsed, dict):
            raise SpecError(f"{SOURCE}: (top level): the stored spec is not a mapping of "
                            "sections")
        return stored_as_it_ran(copy.deepcopy(parsed))

    def section(self, name: str) -> dict:
        """One section as written; {} where the text has none (or is not a spec)."""
        try:
            parsed = self._parsed
        except SpecError:
            return {}
        value = parsed.get(name) if isinstance(parsed, dict) else None
        return value if isinstance(value, dict) else {}

    def get(self, section: str, key: str) -> Any:
        """One field as written; None where the text has none."""
        return self.section(section).get(key)

    @cached_property
    def spec(self):
        """The typed Spec, or None where the text does not make one of this version."""
        from mpiopt.spec._spec import Spec

        try:
            return Spec.from_dict(self.data, SOURCE, check_files=False)
        except Exception:      # (another version's spec: any of its fields may fail here)
            return None


def stored(text: str | None) -> StoredSpec:
    """The stored spec `text` (a StudyRecord's spec_text), to read (see the module
    docstring)."""
    return StoredSpec(text)
