"""Every spec section's declared fields, and the spec reference's tables made from them.

Each section module declares its fields (mpiopt.field.Field) beside the code that reads
them; this module only gathers them by dotted section name, so that the documentation
is generated from the same declarations the reader checks against::

    print(markdown_table("training"))

docs/reference/spec.md holds each table between ``<!-- fields: SECTION -->`` and
``<!-- end fields -->``; `python -m mpiopt.spec.doc --write docs/reference/spec.md` rewrites
them (tests/test_readme_spec.py fails, naming the field, when the page and the
declarations differ).
"""
from __future__ import annotations

import re

from mpiopt.field import Field, Fields
from mpiopt.search import ALGORITHMS
from mpiopt.search.options import OPTIONS
from mpiopt.spec._events import COLLECTION
from mpiopt.spec._search import SEARCH
from mpiopt.spec._sections import DATA, OBJECTIVE, RESOURCES, STUDY
from mpiopt.spec._storage import STORAGE
from mpiopt.spec._training import EARLY_STOPPING, PRUNING, TRAINING

SECTIONS: dict[str, Fields] = {
    "study": STUDY,
    "storage": STORAGE,
    "objective": OBJECTIVE,
    "objective.data": DATA,
    "objective.data.collections": COLLECTION,
    "search": SEARCH,
    **{f"search.{name}": OPTIONS[name] for name in ALGORITHMS},
    "training": TRAINING,
    "training.early_stopping": EARLY_STOPPING,
    "training.pruning": PRUNING,
    "resources": RESOURCES,
}
HEADER = ("field", "type", "default", "meaning")
BLOCK = re.compile(r"(<!-- fields: (?P<section>[a-z_.]+) -->\n)(?P<body>.*?)(<!-- end fields -->)",
                   re.S)


def cells(field: Field) -> tuple[str, str, str]:
    """(type, default, meaning): a table row without its name."""
    return field.type_cell(), field.default_cell(), field.doc


def rows(section: str) -> list[tuple[tuple[str, ...], tuple[str, str, str]]]:
    """[(names, cells), ...]: neighbours with the same cells share a row (`val_npz`, `val_hdf5`)."""
    out: list = []
    for field in SECTIONS[section]:
        if out and out[-1][1] == cells(field):
            out[-1] = (out[-1][0] + (field.name,), out[-1][1])
        else:
            out.append(((field.name,), cells(field)))
    return out


def markdown_table(section: str) -> str:
    """The section's table, or one sentence for a section without fields."""
    if not SECTIONS[section]:
        return f"`{section}` takes no options.\n"
    lines = [_line(HEADER), "|" + "---|" * len(HEADER)]
    for names, row in rows(section):
        if any("|" in cell or "\n" in cell for cell in row):
            raise ValueError(f"{section}.{names[0]}: a table cell cannot hold '|' or a newline")
        lines.append(_line((", ".join(f"`{n}`" for n in names),) + row))
    return "\n".join(lines) + "\n"


def _line(cells: tuple) -> str:
    return "| " + " | ".join(cells) + " |"


def rewrite(text: str) -> str:
    """`text` (docs/reference/spec.md) with every marked table generated again."""
    def table(match: re.Match) -> str:
        section = match.group("section")
        if section not in SECTIONS:
            raise KeyError(f"the page marks an unknown spec section {section!r}")
        return match.group(1) + "\n" + markdown_table(section) + "\n" + match.group(4)

    return BLOCK.sub(table, text)


def marked(text: str) -> dict[str, str]:
    """{section: the text between its markers} in the page's text, blank lines trimmed."""
    return {m.group("section"): m.group("body").strip("\n") + "\n" for m in BLOCK.finditer(text)}
