"""`mpiopt model list STUDY` and `mpiopt model export STUDY [--trial N] -o FILE`: the
trained models a study kept (search.keep_models, training.refit), found through the
artifact store recorded with the study. A few lines each over mpiopt.artifacts.models."""
from __future__ import annotations

import os
import shutil

from mpiopt.cli.common import add_format_option, add_storage_option, print_rows, storage_url


def register(subparsers) -> None:
    parser = subparsers.add_parser("model", help="the trained models a study kept",
                                   description="List or export the models a study kept.")
    sub = parser.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    p = sub.add_parser("list", help="the kept models, best first")
    p.add_argument("study", help="study name")
    add_storage_option(p)
    add_format_option(p)
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("export", help="copy one kept model (a .keras file plain Keras loads, or a "
                         "torch state_dict .pt)")
    p.add_argument("study", help="study name")
    p.add_argument("--trial", type=int, default=None, metavar="N",
                   help="trial number (default: the best trial, or the refit model)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write it")
    add_storage_option(p)
    p.set_defaults(func=cmd_export)


def _record(args):
    from mpiopt.storage import open_storage

    storage = open_storage(storage_url(args), read_only=True)
    return storage, storage.get_study(args.study)


def cmd_list(args) -> int:
    from mpiopt.artifacts.models import listing

    storage, record = _record(args)
    try:
        rows = listing(record)
    finally:
        storage.close()
    print_rows(rows, args.format, ("trial", "value", "fold", "best_epoch", "file"))
    return 0


def cmd_export(args) -> int:
    from mpiopt.artifacts import MODEL_SUFFIXES, atomic_path
    from mpiopt.artifacts.models import model_path
    from mpiopt.errors import MpioptError
    from pathlib import Path

    storage, record = _record(args)
    try:
        path, note = model_path(record, storage, args.trial)
    finally:
        storage.close()
    out = Path(args.output)
    if out.suffix in MODEL_SUFFIXES and out.suffix != path.suffix:
        raise MpioptError(f"-o {args.output}: the kept model is a {path.suffix} file; name "
                          f"its copy {out.with_suffix(path.suffix).name}")
    tmp = atomic_path(out)
    try:
        shutil.copyfile(path, tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    what = "the refit model" if path.stem == "refit" else f"trial {note.get('trial')}"
    print(f"{what} ({record.metric} = {note.get('value')}) -> {out}")
    return 0
