"""Reading a spec file: YAML with duplicate keys refused, overrides, and `_Section`,
which refuses unknown keys and names the file and dotted path in every message."""
from __future__ import annotations

import difflib
import math
import re
from typing import Any

import yaml

from mpiopt.errors import SpecError, shown
from mpiopt.field import REQUIRED

# --------------------------------------------------------------------------- YAML
class _Loader(yaml.SafeLoader):
    """SafeLoader that reads 1e-4 as a float (YAML 1.1 wants 1.0e-4) and refuses
    duplicate keys instead of silently keeping the last one."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _construct_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _Flow(dict):
    """A mapping written on one line."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Flow, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True))
_Dumper.add_representer(list, lambda d, v: d.represent_sequence(
    "tag:yaml.org,2002:seq", v, flow_style=all(not isinstance(x, (dict, list)) for x in v)))


ALIAS_ENTRIES_LIMIT = 100_000
"""How many entries a spec's aliases (`*name`) may add beyond those written out. Each
alias repeats its anchor's whole value, so nine lines of aliases to aliases expand to
10**9 entries (an alias bomb: gigabytes, then a MemoryError after a minute). Checked on
the composed YAML, before any value is built or any field looked at; a spec that writes
out 600,000 choices is not concerned, one that shares a block under a few names neither."""


def _load(text: str, source: str) -> Any:
    """The YAML document in `text`, its aliases bounded (a yaml.YAMLError when it is not
    YAML; a SpecError naming `source` when its aliases expand too far)."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_aliases(node, source)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return _load(text, source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "YAML"
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        message = f"{problem} ({context})" if context else problem
        raise SpecError(f"{source}: {where}: invalid YAML: {' '.join(message.split())}") from None


def _check_aliases(root: yaml.Node, source: str) -> None:
    """Refuse a document whose aliases expand past ALIAS_ENTRIES_LIMIT extra entries, or
    that holds itself. Counts each node's expanded size once (a node an alias names again
    is the same object), so the check is linear in the written nodes."""
    sizes: dict[int, int] = {}
    ancestors: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        children = _children(node)
        if finished:
            ancestors.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            continue
        if key in sizes:
            continue
        if key in ancestors:
            raise SpecError(f"{source}: line {node.start_mark.line + 1}: an alias refers to "
                            "the value that holds it (a value cannot contain itself)")
        ancestors.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)
    extra = sizes[id(root)] - len(sizes)
    if extra > ALIAS_ENTRIES_LIMIT:
        raise SpecError(f"{source}: its aliases (*name) expand to more than "
                        f"{ALIAS_ENTRIES_LIMIT:,} entries beyond those written out; write the "
                        "values out, or use fewer aliases")


def _children(node: yaml.Node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


# --------------------------------------------------------------------------- reading helpers
def _show(value: Any) -> str:
    kinds = {bool: "a boolean", dict: "a mapping", list: "a list", type(None): "null"}
    if type(value) in (dict, list, type(None)):
        return kinds[type(value)]
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    return f"{shown(value)}"


class _Section:
    """One mapping of the spec: refuses unknown keys, reads typed fields, and knows the
    file and dotted path to put in front of every message."""

    def __init__(self, data: Any, source: str, path: str, keys: tuple, what: str = "a mapping"):
        self.source, self.path = source, path
        if not isinstance(data, dict):
            self.fail(None, f"expected {what}, got {_show(data)}")
        self.data = data
        for key in data:
            if key not in keys:
                hint = difflib.get_close_matches(str(key), keys, n=1, cutoff=0.6)
                tip = f"did you mean '{hint[0]}'?" if hint else f"expected one of: {', '.join(keys)}"
                self.fail(key, f"unknown field; {tip}")

    def where(self, key: Any) -> str:
        if key is None:
            return self.path or "(top level)"
        return f"{self.path}.{key}" if self.path else str(key)

    def fail(self, key: Any, message: str):
        raise SpecError(f"{self.source}: {self.where(key)}: {message}")

    def raw(self, key: str, default: Any = REQUIRED) -> Any:
        if key not in self.data:
            if default is REQUIRED:
                self.fail(key, "required field is missing")
            return default
        return self.data[key]

    def text(self, key, default=REQUIRED, choices=None, nullable=False) -> Any:
        value = self.raw(key, default)
        if value is None and (nullable or default is None):
            return None
        if not isinstance(value, str):
            self.fail(key, f"expected a string, got {_show(value)}")
        if choices and value not in choices:
            self.fail(key, f"expected one of {', '.join(choices)}, got {shown(value)}")
        if not choices and not value.strip() and default is REQUIRED:
            self.fail(key, "must not be empty")
        return value

    def integer(self, key, default=REQUIRED, minimum=None, nullable=False) -> Any:
        value = self.raw(key, default)
        if value is None and (nullable or default is None):
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"expected an integer, got {_show(value)}")
        if minimum is not None and value < minimum:
            self.fail(key, f"must be at least {minimum}, got {value}")
        return value

    def number(self, key, default=REQUIRED, low=None, high=None, nullable=False,
              open_low=False, open_high=False) -> Any:
        value = self.raw(key, default)
        if value is None and (nullable or default is None):
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(key, f"expected a finite number, got {_show(value)}")
        too_low = low is not None and (value <= low if open_low else value < low)
        too_high = high is not None and (value >= high if open_high else value > high)
        if too_low or too_high:
            lo, hi = ("(" if open_low else "["), (")" if open_high else "]")
            self.fail(key, f"must be in {lo}{_num(low)}, {_num(high)}{hi}, got {value}")
        return float(value)

    def flag(self, key, default=REQUIRED) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            self.fail(key, f"expected true or false, got {_show(value)}")
        return value

    def duration(self, key) -> float | None:
        """Seconds, or a duration like '90s', '10m', '1h30m'; None when absent."""
        value = self.raw(key, None)
        if value is None:
            return None
        if isinstance(value, str):
            text = value.replace(" ", "")
            parts = list(_DURATION.finditer(text))
            if not text or "".join(p.group(0) for p in parts) != text:
                self.fail(key, f"expected seconds or a duration like '90s', '10m', '2h', '1h30m', got {shown(value)}")
            value = sum(float(p.group(1)) * _UNITS[p.group(2)] for p in parts)
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(key, f"expected seconds or a duration like '10m', got {_show(value)}")
        if not math.isfinite(value) or value <= 0:
            self.fail(key, f"must be a positive duration, got {value}")
        return float(value)

    def section(self, key, keys, default=REQUIRED) -> "_Section | None":
        value = self.raw(key, default)
        if value is None and default is REQUIRED:
            self.fail(key, "required section is empty")
        if value is None:
            value = default
        return _Section(value, self.source, self.where(key), keys)


def _num(x):
    return "inf" if x is None else x


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(d|h|m|s)?")
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1, None: 1}
