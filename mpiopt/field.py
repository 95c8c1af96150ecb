"""A setting declared once: name, type, default, range and one line of documentation.

The spec reader checks a field from its declaration, the searchers take their defaults
from it, and the spec reference's tables (docs/reference/spec.md) are generated from it
(`python -m mpiopt.spec.doc`), so the three cannot drift apart::

    EPOCHS = Field("epochs", 10, "integer", "Epochs per trial (per fold).", low=1)
    EPOCHS.read(section)     # section: mpiopt.spec._Section; a SpecError names the field

Outside mpiopt.spec on purpose: mpiopt.search.options declares its options with it, and
the spec package imports those options.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REQUIRED = object()   # the default of a field that must be given

# kinds read by `Field.read`; any other kind (below) is read by its section's own code
PLAIN = ("text", "integer", "number", "flag", "duration")
STRUCTURED = {"ref": "`file.py:name`", "paths": "path or list of paths", "list": "list",
              "mapping": "mapping", "switch": "mapping, `true` or `null`",
              "call": "name, or mapping of `name` and arguments"}
_TYPES = {"text": "string", "integer": "integer", "number": "number", "flag": "boolean",
          "duration": "duration", **STRUCTURED}


@dataclass(frozen=True)
class Field:
    name: str
    default: Any                    # REQUIRED, or the value taken when the field is absent
    kind: str                       # one of PLAIN, or of STRUCTURED
    doc: str                        # one line, Markdown: the reference's "meaning" cell
    choices: tuple | None = None
    low: float | None = None        # integers: the minimum; numbers: the range
    high: float | None = None
    open_low: bool = False          # numbers: low itself is refused
    open_high: bool = False
    shown: str | None = None        # the reference's default cell, where the value says too little

    def __post_init__(self):
        if self.kind not in _TYPES:
            raise ValueError(f"{self.name}: unknown kind {self.kind!r}")

    @property
    def plain(self) -> bool:
        return self.kind in PLAIN

    def read(self, section, default: Any = None) -> Any:
        """The checked value from a spec section (mpiopt.spec._Section); `default`
        replaces the declared one where it depends on another field."""
        if not self.plain:
            raise TypeError(f"{self.name} is a {self.kind}: its section's code reads it")
        default = self.default if default is None else default
        if self.kind == "text":
            return section.text(self.name, default, choices=self.choices)
        if self.kind == "integer":
            return section.integer(self.name, default, minimum=self.low)
        if self.kind == "number":
            return section.number(self.name, default, low=self.low, high=self.high,
                                  open_low=self.open_low, open_high=self.open_high)
        if self.kind == "duration":
            value = section.duration(self.name)
            return default if value is None else value
        return section.flag(self.name, default)

    # ------------------------------------------------------------------ documentation
    def type_cell(self) -> str:
        """'integer ≥ 1', 'number in (0, 1]', '`GP`, `RF` or `ET`', 'duration', ..."""
        if self.choices:
            quoted = [f"`{c}`" for c in self.choices]
            return ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]
        kind = _TYPES[self.kind]
        if self.low is not None and self.high is not None:
            lo, hi = "(" if self.open_low else "[", ")" if self.open_high else "]"
            return f"{kind} in {lo}{self.low:g}, {self.high:g}{hi}"
        if self.low is not None:
            return f"{kind} {'>' if self.open_low else '≥'} {self.low:g}"
        return kind

    def default_cell(self) -> str:
        if self.shown is not None:
            return self.shown
        if self.default is REQUIRED:
            return "required"
        if self.kind == "duration" and self.default is not None:
            from mpiopt.durations import format_duration

            return f"`{format_duration(self.default)}`"
        return f"`{_value(self.default)}`"


def _value(value: Any) -> str:
    """A value as written in YAML: true, null, "", [], 0.5."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if value == "" or value == [] or value == {}:
        return {str: '""', list: "[]", dict: "{}"}[type(value)]
    return str(value)


class Fields:
    """One section's fields, in the order they are documented and listed in messages."""

    def __init__(self, *fields: Field):
        self._by_name = {f.name: f for f in fields}

    def __iter__(self):
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def __getitem__(self, name: str) -> Field:
        return self._by_name[name]

    @property
    def names(self) -> tuple:
        return tuple(self._by_name)

    def read(self, section) -> dict:
        """{name: checked value} of every plain field; the section's code reads the rest."""
        return {f.name: f.read(section) for f in self if f.plain}

    def defaults(self) -> dict:
        return {f.name: f.default for f in self}
