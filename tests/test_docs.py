"""The documentation says what the code does: every `mpiopt` command line in the pages
parses with the real argument parser, every YAML snippet loads as (part of) a spec, every
Python import in them resolves, the command reference is what the parsers generate, the
environment page names exactly the MPIOPT_* variables the code reads, the benchmark
plots show the results files' figures, and no page narrates history.

The spec reference's tables are checked field by field in tests/test_readme_spec.py.
"""
from __future__ import annotations

import copy
import importlib
import re
import shlex
import sys

import pytest
import yaml

from conftest import ROOT

PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.M)      # a file included whole (pymdownx.snippets)


def blocks(lang: str) -> list[tuple[str, str]]:
    """[(page:line, code)] of every fenced block of `lang` in the pages."""
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group(1) == lang:
                line = text.count("\n", 0, match.start()) + 1
                code = SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text(), match.group(2))
                out.append((f"{page.relative_to(ROOT)}:{line}", code))
    return out


# ---- commands ----

def command_lines() -> list[tuple[str, str]]:
    """[(where, 'mpiopt ...')] from the bash blocks: what follows a word `mpiopt` that
    starts a command (after mpirun/srun/mpiexec and their options), up to a comment or pipe."""
    out = []
    for where, code in blocks("bash"):
        for line in code.splitlines():
            line = re.sub(r"\s#.*$", "", line).split("|")[0].strip()
            match = re.search(r"(?:^|[\s=(])mpiopt\s+([a-z].*)$", line)
            if match and not line.startswith("#"):
                out.append((where, "mpiopt " + match.group(1)))
    return out


def _argv(line: str) -> list[str]:
    """The command's arguments, with the pages' notation for optional parts
    (`[--trials 60]`, `...`) read as given."""
    words = shlex.split(line.replace("[", " ").replace("]", " "))[1:]
    return [w for w in words if w != "..."]


def test_the_pages_hold_commands():
    found = {line.split()[1] for _, line in command_lines()}
    assert {"search", "resume", "validate", "status", "report", "best", "trials"} <= found


@pytest.mark.parametrize("where,line", command_lines())
def test_every_command_in_the_pages_parses(where, line, capsys):
    from mpiopt.cli.main import build_parser

    try:
        args = build_parser().parse_args(_argv(line))
    except SystemExit:
        pytest.fail(f"{where}: `{line}` is refused by mpiopt's parser: "
                    f"{capsys.readouterr().err.strip()}")
    assert getattr(args, "func", None), f"{where}: `{line}` names no command"


# ---- spec snippets ----

SECTIONS = {"study", "storage", "objective", "search_space", "search", "training", "resources"}
BASE = {
    "study": {"name": "snippet"},
    "objective": {"function": "f.py:f"},
    "search_space": {"x1": {"type": "real", "low": -5.0, "high": 10.0},
                     "x2": {"type": "real", "low": 0.0, "high": 15.0}},
    "search": {"trials": 5},
}
REF = re.compile(r"^([\w./-]+\.py):(\w+)$")


def _merged(snippet: dict) -> dict:
    """The snippet over a small complete spec: a section it gives replaces the base's
    (objective, space) or is merged into it (the others)."""
    spec = copy.deepcopy(BASE)
    for key, value in snippet.items():
        if key in ("objective", "search_space", "study") or not isinstance(value, dict):
            spec[key] = value
        else:
            spec.setdefault(key, {}).update(value)
    objective = spec["objective"]
    if isinstance(objective, dict) and not {"function", "model"} & objective.keys():
        objective.update({"model": "m.py:build", "data": objective.get("data", {"loader": "m.py:load"})})
    if spec.get("search", {}).get("algorithm") == "pbt" and "function" in objective:
        spec["objective"] = {"model": "m.py:build", "data": {"loader": "m.py:load"}}
    return spec


def _write_referenced_files(value, folder) -> None:
    """Every `file.py:name` the spec names, as a file defining `name`; every data file
    (a glob's first match) as an empty file."""
    if isinstance(value, dict):
        for item in value.values():
            _write_referenced_files(item, folder)
    elif isinstance(value, list):
        for item in value:
            _write_referenced_files(item, folder)
    elif isinstance(value, str) and REF.match(value):
        path, name = REF.match(value).groups()
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a") as out:
            out.write(f"\ndef {name}(*args, **kwargs):\n    return 0.0\n")
    elif isinstance(value, str) and re.search(r"\.(npz|h5|hdf5)$", value):
        target = folder / value.replace("*", "0")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()


def _fill_data_files(spec, folder) -> None:
    """The empty npz/HDF5 files, made real with the data section's array names: the spec
    opens every data file's header when it is read."""
    import numpy as np

    data = spec["objective"].get("data") or {}
    names = {data.get("features", "features"): np.zeros((4, 2)),
             data.get("labels", "labels"): np.arange(4) % 2}
    for path in folder.rglob("*"):
        if path.suffix == ".npz":
            np.savez(path, **names)
        elif path.suffix in (".h5", ".hdf5"):
            import h5py

            with h5py.File(path, "w") as h5:
                for name, array in names.items():
                    h5[name] = array


@pytest.mark.parametrize("where,code", blocks("yaml"))
def test_every_yaml_snippet_loads_as_a_spec(where, code, tmp_path):
    from mpiopt.errors import SpecError
    from mpiopt.spec import load_spec

    snippet = yaml.safe_load(code)
    assert isinstance(snippet, dict), f"{where}: a YAML block that is not a mapping"
    unknown = set(snippet) - SECTIONS
    assert not unknown, f"{where}: {sorted(unknown)} is not a spec section"
    spec = _merged(snippet)
    _write_referenced_files(spec, tmp_path)
    _fill_data_files(spec, tmp_path)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    try:
        load_spec(tmp_path / "spec.yaml")
    except SpecError as exc:
        pytest.fail(f"{where}: the snippet does not load as a spec: {exc}")


# ---- Python ----

def import_lines() -> list[tuple[str, str]]:
    return [(where, re.sub(r"\s*#.*$", "", line).strip()) for where, code in blocks("python")
            for line in code.splitlines() if re.match(r"\s*(from \S+ )?import ", line)]


@pytest.mark.parametrize("where,line", import_lines())
def test_every_import_in_the_pages_resolves(where, line):
    match = re.match(r"from (\S+) import (.+)$", line)
    if not match:
        for name in line.split("import", 1)[1].split(","):
            importlib.import_module(name.strip().split(" as ")[0])
        return
    module = importlib.import_module(match.group(1))
    for name in match.group(2).split(","):
        name = name.strip().split(" as ")[0]
        assert hasattr(module, name), f"{where}: {match.group(1)} has no {name}"


# ---- generated and hand-written references ----

def test_the_command_reference_is_what_the_parsers_give():
    from mpiopt.cli.doc import page

    assert (ROOT / "docs/reference/cli.md").read_text(encoding="utf-8") == page(), \
        "docs/reference/cli.md is stale: python -m mpiopt.cli.doc --write docs/reference/cli.md"


def test_the_command_reference_lists_every_command():
    from mpiopt.cli.doc import _subcommands
    from mpiopt.cli.main import build_parser

    text = (ROOT / "docs/reference/cli.md").read_text(encoding="utf-8")
    for name, _, sub in _subcommands(build_parser()):
        assert f"## `mpiopt {name}`" in text
        for action, _, _ in _subcommands(sub):
            assert f"### `mpiopt {name} {action}`" in text


def test_the_environment_page_names_exactly_the_variables_the_code_reads():
    read = set()
    for path in (ROOT / "mpiopt").rglob("*.py"):
        read |= set(re.findall(r"MPIOPT_[A-Z][A-Z_]*[A-Z]", path.read_text(encoding="utf-8")))
    page = (ROOT / "docs/reference/environment.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(MPIOPT_[A-Z_]+)`", page, re.M))
    assert read - documented == set(), f"read by the code, not documented: {sorted(read - documented)}"
    assert documented - read == set(), f"documented, not read: {sorted(documented - read)}"


def test_the_resume_guide_names_every_field_a_resume_may_change():
    from mpiopt.study.opening import RESUMABLE_CHANGES

    text = " ".join((ROOT / "docs/how-to/resume.md").read_text(encoding="utf-8").split())
    missing = [key for key in RESUMABLE_CHANGES if f"`{key}`" not in text]
    assert not missing, f"docs/how-to/resume.md does not say these may change on resume: {missing}"


def test_the_benchmark_plots_show_the_results_files(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import plots
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    ranks, efficiency = plots.mean_ranks(), plots.efficiency_by_groups()
    assert sorted(ranks) == [1, 4, 16] and "auto" in ranks[1]
    assert {"random", "evolutionary", "bayesian"} <= set(efficiency)
    for name in plots.PLOTS:
        assert (ROOT / "docs/images" / name).exists(), f"run python benchmarks/plots.py ({name})"
    svg = (ROOT / "docs/images/quality-rank.svg").read_text()
    assert all(s in svg for s in ranks[16]), "quality-rank.svg lacks a searcher: rerun plots.py"


def test_the_summary_links_every_results_file():
    summary = (ROOT / "docs/benchmarks.md").read_text(encoding="utf-8")
    for path in (ROOT / "benchmarks/results").glob("*.md"):
        assert f"../benchmarks/results/{path.name}" in summary, f"docs/benchmarks.md lacks {path.name}"


# ---- what the pages are ----

HISTORY = re.compile(r"(?<!are )(?<!is )(?<!be )\bused to\b|\bwent from\b|\bbefore this\b|\bwe tried\b|\bwas measured and "
                     r"dropped\b|\buntil 20\d\d|\bno longer .* since\b|\bpreviously\b|\bissue \d+|"
                     r"^Before, ", re.I)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_narrates_history(page):
    hits = [line for line in page.read_text(encoding="utf-8").splitlines() if HISTORY.search(line)]
    assert not hits, f"{page.relative_to(ROOT)} narrates history (it lives in git): {hits[:3]}"


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 150, f"README.md has {lines} lines; the detail belongs in docs/"
