"""JSON text, written one way everywhere: every `json.dump`/`json.dumps` of mpiopt is here
(tests/test_json_text.py holds the rest of the package to that).

Two readers, two writers:

- `dumps`/`dump`, for everyone else: what a script, `jq`, a browser's `JSON.parse` or
  another tool reads (the commands' `--format json`, `mpiopt export`, the dashboard's API,
  the report's embedded data, a kept model's note). Strict JSON: a NaN or an infinity (a
  diverged epoch, a gradient norm that overflowed) is written `null`, because JSON has no
  such number and those readers reject the bare `NaN`/`Infinity` Python's json writes.
- `exact`, for mpiopt itself: text only mpiopt reads back (the database's text columns,
  the recovery file, a checkpoint's meta, fingerprints). Every float as it is, NaN and
  infinities too, because a value read back must be the value written (a fold's best
  value is NaN until its first epoch; a metric that overflowed stays `inf`), and what
  leaves through `dumps` is made strict on its way out.
"""
from __future__ import annotations

import json
import math
from typing import Any, Callable


def finite_only(value: Any) -> Any:
    """`value` with every non-finite float inside dicts, lists and tuples as None; nothing
    else changed (a float subclass such as numpy's float64 counts as a float)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_only(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_only(v) for v in value]
    return value


def dumps(value: Any, *, default: Callable[[Any], Any] | None = None, **options) -> str:
    """Strict JSON text of `value`, non-finite floats as null. What `default` makes of an
    object json cannot write (a numpy float32, an array) is made finite too, so no value
    can reach the text as NaN or Infinity. `options`: json.dumps's (indent, separators...)."""
    strict_default = None if default is None else (lambda obj: finite_only(default(obj)))
    return json.dumps(finite_only(value), allow_nan=False, default=strict_default, **options)


def dump(value: Any, out, **options) -> None:
    """`dumps` written to the text stream `out`."""
    out.write(dumps(value, **options))


def exact(value: Any, **options) -> str:
    """JSON text mpiopt alone reads back (json.loads reads its NaN and Infinity): every
    float kept as it is. Not for anything a person or another program reads."""
    return json.dumps(value, **options)
