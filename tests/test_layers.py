"""The house keeps its shape: every import of mpiopt's code runs down the layers (or
stays in its room), and no modules import each other in a circle.

The layers, top to bottom, as the code depends on them (a room may import any room below
it, never one above): the CLI; the run of a study (start-up, signals, the end); parallel
(everything that knows MPI); Optuna's importance and visualization modules over the Python
API; the study's records and the Python API; reporting (tables,
figures, progress, the commands printed for a person); the spec; the objective and what runs it; training; the artifact store; storage (SQL);
the searchers; the search space; and at the ground the small modules every layer shares.
Imports inside functions count too: they are imports all the same. The package's own
face (mpiopt/__init__.py, __main__.py) stands above all and may import anything.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "mpiopt"

LAYERS = [
    {"cli"},
    {"run"},
    {"parallel"},
    {"importance", "visualization"},     # Optuna's names over the Python API
    {"study"},
    {"reporting"},
    {"spec"},
    {"objective"},
    {"training"},
    {"artifacts"},
    {"storage"},
    {"search"},
    {"space"},
    {"field", "refs", "kept"},
    {"errors", "trial", "durations", "backoff", "knobs", "names", "jsontext", "storable", "sqlite_urls",
     "_alembic", "_searchspaces"},
]
FACE = {"__init__", "__main__"}
LEVEL = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(path: Path, modules: dict) -> set[str]:
    """The mpiopt modules this file imports (a name imported from a package is its
    submodule where there is one)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "mpiopt"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "mpiopt":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return {m for m in found if m in modules}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_import_runs_down_the_layers():
    modules = _modules()
    upward = []
    for name, path in sorted(modules.items()):
        src = _room(name)
        if src in FACE:
            continue
        assert src in LEVEL, f"{path}: room '{src}' has no layer in tests/test_layers.py"
        for target in sorted(_imports(path, modules)):
            dst = _room(target)
            if dst != src and dst not in FACE and LEVEL[dst] < LEVEL[src]:
                upward.append(f"{name} -> {target}")
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


def test_no_modules_import_each_other_in_a_circle():
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    # a package's face imports its own parts: not an edge of a circle
    graph = {n: {t for t in ts if not t.startswith(n + ".")} for n, ts in graph.items()}
    circles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                circles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)
