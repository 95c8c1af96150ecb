"""Options and output shared by the commands."""
from __future__ import annotations

import sys
from typing import Any, Sequence

from mpiopt import jsontext


def add_storage_option(parser) -> None:
    parser.add_argument(
        "--storage",
        default=None,
        help="SQLAlchemy URL of the results database (default: $MPIOPT_STORAGE, then the "
        "spec's storage, then sqlite:///mpiopt.db in the current directory)",
    )


def storage_url(args, from_spec: str | None = None) -> str:
    """--storage, else MPIOPT_STORAGE (a URL with a password need not sit in a spec file or
    a shell history), else the spec's storage, else the default."""
    from mpiopt.storage._urls import StorageURL

    return StorageURL.default(getattr(args, "storage", None), from_spec).text


def add_format_option(parser) -> None:
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="table: aligned columns for people; json: for scripts")


def print_rows(rows: Sequence[dict[str, Any]], fmt: str, columns: Sequence[str] | None = None,
               out=None) -> None:
    """Print rows as an aligned table for people, as wide as their terminal
    (mpiopt.reporting.terminal.fit_table), or as JSON for scripts."""
    from mpiopt.reporting.terminal import fit_table, table_width

    out = out or sys.stdout
    if fmt == "json":
        jsontext.dump(list(rows), out, indent=2, default=str)
        out.write("\n")
        return
    columns = list(columns or (rows[0].keys() if rows else []))
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    for line in fit_table(columns, cells, table_width(out)):
        out.write(line + "\n")


def print_text(text: str, out=None) -> None:
    """A line for people, wrapped between words to the terminal's width."""
    import textwrap

    from mpiopt.reporting.terminal import table_width

    out = out or sys.stdout
    width = table_width(out)
    lines = textwrap.wrap(text, width, break_long_words=False) if width else [text]
    out.write("\n".join(lines or [""]) + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        return " ".join(f"{k}={_cell(v)}" for k, v in value.items())
    return str(value)


SLOW_START_S = 5.0     # a step of the start-up that takes longer is named on stderr


def read_spec(path, overrides=None):
    """load_spec, saying on stderr what it is doing when that takes over SLOW_START_S (a
    spec of hundreds of thousands of choices takes minutes, and without a word it looks
    hung)."""
    import os
    import threading

    from mpiopt.spec import load_spec

    def note():
        try:
            size = f" ({os.path.getsize(path) / 1e6:.1f} MB)"
        except OSError:
            size = ""
        print(f"mpiopt: reading and checking {path}{size} takes a while...", file=sys.stderr,
              flush=True)

    timer = threading.Timer(SLOW_START_S, note)
    timer.daemon = True
    timer.start()
    try:
        return load_spec(path, overrides)
    finally:
        timer.cancel()
