"""Options and output shared by the commands."""
from __future__ import annotations

import json
import sys
from typing import Any, Sequence

DEFAULT_STORAGE = "sqlite:///mpiopt.db"


def add_storage_option(parser) -> None:
    parser.add_argument(
        "--storage",
        default=None,
        help="SQLAlchemy URL of the results database (default: $MPIOPT_STORAGE, then the "
        f"spec's storage, then {DEFAULT_STORAGE} in the current directory)",
    )


def storage_url(args, from_spec: str | None = None) -> str:
    """--storage, else MPIOPT_STORAGE (a URL with a password need not sit in a spec file or
    a shell history), else the spec's storage, else the default."""
    import os

    from mpiopt.spec._storage import expand_home

    return expand_home(getattr(args, "storage", None) or os.environ.get("MPIOPT_STORAGE")
                       or from_spec or DEFAULT_STORAGE)


def add_format_option(parser) -> None:
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="table: aligned columns for people; json: for scripts")


def print_rows(rows: Sequence[dict[str, Any]], fmt: str, columns: Sequence[str] | None = None,
               out=None) -> None:
    """Print rows as an aligned table for people or as JSON for scripts."""
    out = out or sys.stdout
    if fmt == "json":
        json.dump(list(rows), out, indent=2, default=str)
        out.write("\n")
        return
    columns = list(columns or (rows[0].keys() if rows else []))
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    out.write("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        return " ".join(f"{k}={_cell(v)}" for k, v in value.items())
    return str(value)
