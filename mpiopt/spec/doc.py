"""The spec reference's field tables, generated from the declared fields (for developers).

    python -m mpiopt.spec.doc                                # every table, under its section
    python -m mpiopt.spec.doc training                       # one section's table
    python -m mpiopt.spec.doc --write docs/reference/spec.md # rewrite the marked tables
    python -m mpiopt.spec.doc --check docs/reference/spec.md # exit 1 if they are stale

Change a field's declaration (mpiopt/spec/_*.py, mpiopt/search/options.py), then
`--write docs/reference/spec.md`: the reference never says what the reader does not do.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mpiopt.spec.fields import SECTIONS, markdown_table, rewrite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpiopt.spec.doc",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("sections", nargs="*", metavar="SECTION",
                        help=f"print these sections' tables (of: {', '.join(SECTIONS)})")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="FILE", type=Path, help="rewrite FILE's marked tables")
    group.add_argument("--check", metavar="FILE", type=Path,
                       help="exit 1 if FILE's tables are stale")
    args = parser.parse_args(argv)
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section {unknown[0]!r}; expected one of: {', '.join(SECTIONS)}")
    if args.write or args.check:
        file = args.write or args.check
        text = file.read_text(encoding="utf-8")
        fresh = rewrite(text)
        if args.check:
            print(f"{file}: spec tables {'up to date' if fresh == text else 'out of date'}")
            return 0 if fresh == text else 1
        file.write_text(fresh, encoding="utf-8")
        print(f"{file}: spec tables {'unchanged' if fresh == text else 'rewritten'}")
        return 0
    for section in args.sections or SECTIONS:
        print(f"`{section}`:\n\n{markdown_table(section)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
