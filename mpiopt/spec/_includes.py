"""`include:` of search spaces shipped in searchspaces/ or beside the spec."""
from __future__ import annotations

import copy
import difflib
from pathlib import Path


from mpiopt.errors import SpecError
from mpiopt.spec._reader import _parse_yaml, _show

# --------------------------------------------------------------------------- includes
def shipped_searchspaces() -> Path:
    """The searchspaces/ shipped with mpiopt (inside the wheel, or the source checkout)."""
    package = Path(__file__).resolve().parent.parent      # mpiopt/
    for candidate in (package / "_searchspaces", package.parent / "searchspaces"):
        if candidate.is_dir():
            return candidate
    return package / "_searchspaces"


def _expand_includes(raw: dict, source: str, base_dir: Path) -> None:
    """Replace search_space.include by the parameters of the named files; inline entries
    replace included ones of the same name, and `name: null` drops an included one.
    Records where each entry came from in raw['_origins'] for error messages."""
    entries = raw.get("search_space")
    if not isinstance(entries, dict) or "include" not in entries:
        return
    entries = dict(entries)
    include = entries.pop("include")
    names = [include] if isinstance(include, str) else include
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
        raise SpecError(f"{source}: search_space.include: expected a name or a list of names/paths, "
                        f"got {_show(include)}")
    merged, origins = {}, {}
    for name in names:
        file = _find_include(name, source, base_dir)
        for key, entry in _read_include(file).items():
            merged[key] = entry
            origins[key] = (str(file), "")
    for key, entry in entries.items():
        if entry is None:
            merged.pop(key, None)
            origins.pop(key, None)
        else:
            merged[key] = entry
            origins.pop(key, None)
    raw["search_space"] = merged
    raw["_origins"] = origins


def _find_include(name: str, source: str, base_dir: Path) -> Path:
    local = Path(name).expanduser()
    local = local if local.is_absolute() else base_dir / local
    for candidate in (local, local.with_name(local.name + ".yaml")):
        if candidate.is_file():
            return candidate
    shipped = shipped_searchspaces()
    stem = Path(name).stem if name.endswith((".yaml", ".yml")) else name
    file = shipped / f"{stem}.yaml"
    if "/" not in name and file.is_file():
        return file
    known = sorted(p.stem for p in shipped.glob("*.yaml"))
    hint = difflib.get_close_matches(stem, known, n=1)
    tip = f"did you mean '{hint[0]}'? " if hint else ""
    raise SpecError(f"{source}: search_space.include: unknown search space {name!r}; {tip}"
                    f"expected a file relative to the spec or one of: {', '.join(known)}")


def _read_include(file: Path) -> dict:
    data = _parse_yaml(file.read_text(encoding="utf-8"), str(file))
    if not isinstance(data, dict) or not data:
        raise SpecError(f"{file}: (top level): expected a mapping of parameter name -> definition")
    if "include" in data:
        raise SpecError(f"{file}: include: an included search space cannot include others")
    return copy.deepcopy(data)


