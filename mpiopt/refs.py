"""References of the form ``path/to/file.py:name`` to user code (objectives, models, loaders).

Two levels of checking, because they run in different places:

- :func:`check_ref` is static: it reads the file's syntax tree and looks for a top-level
  definition of ``name``. Nothing of the user's is executed, so loading a spec on every MPI
  rank, or for a query, never imports TensorFlow or runs side effects.
- :func:`load_callable` imports the file under the name ``import`` finds it by from its
  folder (a name unique to its absolute path where that name is another module's, so two
  ``model.py`` files never collide) and returns the object.

Both raise SpecError with the usual one line ``FILE: field: message``.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Callable

from mpiopt.errors import SpecError


def split_ref(ref: object, source: str = "<spec>", field: str = "objective.function") -> tuple[str, str]:
    """``"dir/file.py:name"`` -> ``("dir/file.py", "name")``, or SpecError saying the form."""
    if not isinstance(ref, str) or ":" not in ref:
        raise SpecError(f"{source}: {field}: expected 'file.py:name', got {ref!r}")
    path, name = ref.rsplit(":", 1)
    if not path.endswith(".py") or not name.isidentifier():
        raise SpecError(f"{source}: {field}: expected 'file.py:name', got {ref!r}")
    return path, name


def resolve_ref(ref: object, base_dir: Path | str | None, source: str = "<spec>",
                field: str = "objective.function") -> tuple[Path, str]:
    """The absolute file path (relative paths count from base_dir) and the name."""
    path, name = split_ref(ref, source, field)
    file = Path(path).expanduser()
    if not file.is_absolute():
        file = Path(base_dir or ".") / file
    return file.resolve(), name


def _top_level_names(tree: ast.Module) -> tuple[set[str], bool]:
    """Names bound at module level (defs, classes, assignments, imports), including inside
    top-level if/try blocks; and whether a star import makes the answer unknowable."""
    names: set[str] = set()
    star = False
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    star = True
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for part in ("body", "orelse", "finalbody", "handlers"):
                stack.extend(getattr(node, part, []) or [])
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)
    return names, star


def check_ref(ref: object, base_dir: Path | str | None, source: str = "<spec>",
              field: str = "objective.function") -> str:
    """Check statically that the file exists, parses and defines the name.

    Returns the reference with an absolute path, the form stored in a resolved spec."""
    file, name = resolve_ref(ref, base_dir, source, field)
    if not file.is_file():
        raise SpecError(f"{source}: {field}: file not found: {file}")
    try:
        tree = ast.parse(file.read_bytes(), filename=str(file))
    except SyntaxError as exc:
        raise SpecError(f"{source}: {field}: {file.name} line {exc.lineno}: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{source}: {field}: cannot read {file}: {exc}") from None
    names, star = _top_level_names(tree)
    if name not in names and not star:
        raise SpecError(f"{source}: {field}: {file.name} does not define '{name}'")
    return f"{file}:{name}"


def imports_of(file: Path) -> set[str]:
    """The top-level packages a file imports anywhere (in functions too), read from its
    syntax tree; imports inside a `try` are left out (a fallback the file tolerates
    missing). An unreadable file imports nothing as far as this can tell."""
    try:
        tree = ast.parse(Path(file).read_bytes(), filename=str(file))
    except (OSError, SyntaxError, ValueError):
        return set()
    tolerated = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                 for part in t.body for n in ast.walk(part)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in tolerated:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def may_take(ref: str, argument: str, base_dir: Path | str | None = None) -> bool:
    """Whether the function `ref` names may take the keyword `argument`, read from the
    file's syntax tree (nothing runs): its last top-level binding is a `def` with that
    parameter or with **kwargs, or anything else (a callable made at import time, an
    unreadable file: it may)."""
    try:
        file, name = resolve_ref(ref, base_dir)
        tree = ast.parse(Path(file).read_bytes(), filename=str(file))
    except (OSError, SyntaxError, ValueError, SpecError):
        return True
    last = None
    for node in tree.body:
        if name in _binds(node):
            last = node
    if not isinstance(last, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return True
    args = last.args
    return args.kwarg is not None or argument in {a.arg for a in (*args.args, *args.kwonlyargs)}


def _binds(node) -> set[str]:
    """The names a top-level statement binds (the ones may_take looks at)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    targets = node.targets if isinstance(node, ast.Assign) else \
        [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
    return {t.id for t in targets if isinstance(t, ast.Name)}


def _module_name(file: Path) -> str:
    """The name the file is imported under: its stem, where ``import STEM`` finds this
    very file (its folder is on sys.path by then). A process pool's workers started by
    ``spawn`` or ``forkserver`` (Python 3.14's default on Linux) get the parent's sys.path
    and import, by name, the module of every function and class they are sent: under a
    name only this process knows they die of ModuleNotFoundError, and the pool waits for
    ever for the task they lost. Where the stem finds another module (a file named like
    one already imported, a second ``model.py`` from another folder, a stem with a dot)
    the file gets a name unique to its path instead: two files never share a module,
    and only such a file's pool workers cannot import it."""
    if "." not in file.stem and _finds(file.stem, file):
        return file.stem
    digest = hashlib.sha256(str(file).encode()).hexdigest()[:12]
    stem = "".join(c if c.isalnum() else "_" for c in file.stem)
    return f"mpiopt_user_{stem}_{digest}"


def _finds(name: str, file: Path) -> bool:
    """Whether ``import name`` gives this file, here and in a process started with this
    sys.path (the same finders, in the same order)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):      # (a module loaded without a spec)
        return False
    origin = spec.origin if spec is not None else None
    return bool(origin) and Path(origin).resolve() == file


def load_callable(ref: str, base_dir: Path | str | None = None, source: str = "<spec>",
                  field: str = "objective.function") -> Callable:
    """Import the file once per process and return the callable it defines under name."""
    file, name = resolve_ref(ref, base_dir, source, field)
    if not file.is_file():
        raise SpecError(f"{source}: {field}: file not found: {file}")
    _on_path(file.parent)
    module_name = _module_name(file)
    module = sys.modules.get(module_name)
    if module is None:
        module = _import_file(file, module_name, source, field)
    obj = getattr(module, name, None)
    if obj is None:
        raise SpecError(f"{source}: {field}: {file.name} does not define '{name}'")
    if not callable(obj):
        raise SpecError(f"{source}: {field}: '{name}' in {file.name} is not callable")
    return obj


def _on_path(folder: Path) -> None:
    """The file's folder goes first on sys.path (unless already there), so the file can
    import its sibling modules, and a process started with this sys.path finds it."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def _import_file(file: Path, module_name: str, source: str, field: str):
    spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # before exec: dataclasses and pickle look it up
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's module failed; say where, in one line
        del sys.modules[module_name]
        lines = str(exc).strip().splitlines()
        what = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        raise SpecError(f"{source}: {field}: importing {file.name} failed: {what}") from exc
    return module
