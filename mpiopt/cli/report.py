"""`mpiopt report` (one offline HTML page) and `mpiopt plot` (one PNG/SVG per kind).

Thin: check the arguments, read the study read-only, hand it to mpiopt.reporting, write
the file. The output is checked before the database is opened, and written under a
temporary name and renamed, so bad input or a failure leaves nothing behind.
plotly, matplotlib and scikit-learn are imported only here, when a command runs.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from mpiopt.cli.common import add_storage_option, storage_url
from mpiopt.errors import MpioptError
from mpiopt.reporting.figures import KINDS, MULTI_KINDS, PBT_KINDS   # no plotting library
from mpiopt.names import file_stem

PLOT_KINDS = KINDS + MULTI_KINDS + PBT_KINDS
from mpiopt.reporting.static import FORMATS as PLOT_FORMATS


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="one self-contained HTML page of a study",
                              description="Write one HTML page (plotly.js inside: it opens "
                              "offline) with every plot of a study; also while it runs.")
    p.add_argument("study", help="study name")
    p.add_argument("-o", "--output", metavar="FILE.html", default=None,
                   help="where to write it (default: STUDY.html)")
    add_storage_option(p)
    p.set_defaults(func=cmd_report)
    p = subparsers.add_parser("plot", help="one plot of a study as PNG or SVG (matplotlib)",
                              description="Draw one plot of a study with matplotlib, for a "
                              f"machine without a browser. KIND: {', '.join(PLOT_KINDS)}.")
    p.add_argument("kind", metavar="KIND", help=" | ".join(PLOT_KINDS))
    p.add_argument("study", help="study name")
    p.add_argument("-o", "--output", metavar="FILE", required=True, help="FILE.png or FILE.svg")
    add_storage_option(p)
    p.set_defaults(func=cmd_plot)


def load_view(args):
    """The study as mpiopt.reporting sees it, read through a read-only storage."""
    from mpiopt.reporting.view import StudyView
    from mpiopt.storage import open_storage

    with open_storage(storage_url(args), read_only=True) as storage:
        record = storage.get_study(args.study)
        return StudyView.of(record, storage.get_trials(record.id),
                            jobs=storage.list_jobs(record.id))


def cmd_report(args) -> int:
    out = Path(args.output or f"{file_stem(args.study)}.html")
    if out.suffix.lower() not in (".html", ".htm"):
        raise MpioptError(f"report output {out}: expected a .html file")
    _check_folder(out)
    view = load_view(args)
    from mpiopt.reporting.html import render

    _write(out, render(view).encode("utf-8"))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): study '{view.name}', "
          f"{len(view.trials)} trials", file=sys.stderr)
    return 0


def cmd_plot(args) -> int:
    if args.kind not in PLOT_KINDS:
        raise MpioptError(f"unknown plot kind '{args.kind}'; known: {', '.join(PLOT_KINDS)}")
    out = Path(args.output)
    if out.suffix.lower() not in PLOT_FORMATS:
        raise MpioptError(f"plot output {out}: expected a .png or .svg file")
    _check_folder(out)
    view = load_view(args)
    from mpiopt.reporting.figures import panel
    from mpiopt.reporting.static import save

    shown = panel(args.kind, view)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp{out.suffix.lower()}")
    try:
        save(shown, tmp)
        os.replace(tmp, out)
    except OSError as exc:
        raise MpioptError(f"cannot write {out}: {exc.strerror}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    if shown.note or shown.caption:
        print(f"mpiopt: note: {args.kind}: {shown.note or shown.caption}", file=sys.stderr)
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _check_folder(out: Path) -> None:
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise MpioptError(f"cannot write {out}: folder {folder} does not exist")


def _write(out: Path, data: bytes) -> None:
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, out)
    except OSError as exc:
        raise MpioptError(f"cannot write {out}: {exc.strerror}") from exc
    finally:
        tmp.unlink(missing_ok=True)
