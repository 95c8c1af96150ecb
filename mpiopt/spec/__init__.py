"""The study spec: one YAML file -> a validated, typed, frozen :class:`Spec`.

Every mistake a user can make in the file becomes one SpecError line that names the file,
the dotted field path and what is expected, e.g.::

    spec.yaml: search.trails: unknown field; did you mean 'trials'?

Nothing of the user's code runs while a spec loads: ``file.py:name`` references are
checked on the file's syntax tree (see mpiopt.refs), so every MPI rank and every
query command can load a spec cheaply. The field reference is docs/reference/spec.md.

The package is split by section: `_reader` (YAML and `_Section`, which every section reads
through), `_build` (loading, overrides, the top level and the rules tying sections
together), one module per section (`_sections`: study, resources, objective;
`_storage`, `_search`, `_training`, `_space`), `_includes`, `_types` (the frozen
dataclasses), `_resolved` (the resolved spec as dicts) and `_stored` (the spec stored with
a study, read back: `stored()`, its one reader). Each section module declares
its plain fields once (mpiopt.field.Field: type, default, range, doc line) and reads them
from there; `fields` gathers the declarations and makes the reference's tables from them
(`python -m mpiopt.spec.doc --write docs/reference/spec.md`), and tests/test_readme_spec.py
fails, naming the field, when the page and the declarations differ.
"""
from __future__ import annotations

from mpiopt.spec._types import (ALGORITHMS, DataSpec, EarlyStoppingSpec, ObjectiveSpec,
                                PruningSpec, ResourcesSpec, SearchSpec, StudySpec, TrainingSpec)
from mpiopt.spec._build import parse_overrides
from mpiopt.spec._spec import Spec, load_spec
from mpiopt.spec._stored import StoredSpec, stored
from mpiopt.spec._includes import shipped_searchspaces
from mpiopt.spec._reader import _Section

__all__ = ["Spec", "StudySpec", "ObjectiveSpec", "DataSpec", "SearchSpec", "TrainingSpec",
           "EarlyStoppingSpec", "PruningSpec", "ResourcesSpec", "load_spec", "parse_overrides",
           "shipped_searchspaces", "ALGORITHMS", "StoredSpec", "stored", "_Section"]
