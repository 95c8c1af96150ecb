"""`mpiopt report`, `mpiopt plot` and the chrome trace on real studies, the page in a real browser.

Two studies, made once per module, the cheapest real way:
- `curves`: a function objective (tests/objectives/learning.py) under `mpiexec -n 5`, so 4
  groups of 1 rank: learning curves, pruned and failed trials (about 2 s);
- `digits` and `jets-pareto`: the examples' Keras studies (examples/digits, and the jets
  CNN with two objectives, AUC and parameter count), shrunk to 4 trials of 2 epochs and
  2 folds, in single-process mode (about 10 s each, most of it importing TensorFlow).
The browser is Debian's chromium, headless: a missing browser FAILS these tests (CI
installs it with .ci/ensure-chromium), it never skips them quietly.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, mpiopt, subprocess_env
from mpiopt.reporting.figures import KINDS

CURVES_SPEC = """
study: {name: curves}
objective: {function: %s:curve, metric: value, direction: minimize}
search_space:
  x: {type: real, low: -5.0, high: 10.0}
  y: {type: real, low: 0.01, high: 15.0, prior: log-uniform}
  kind: [a, b]
search: {algorithm: random, trials: 20, seed: 3}
training: {pruning: {pruner: median, warmup_epochs: 3, min_trials: 4}}
"""
# Messages the browser itself logs about its software WebGL (parcoords and scatter3d draw
# with WebGL) and its hint that a canvas read back often would be faster another way.
BROWSER_NOISE = re.compile(r'"\[\.WebGL-|Automatic fallback to software WebGL|'
                           r'"Canvas2D: Multiple readback operations')


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """The storage URL of one SQLite file holding both studies."""
    folder = tmp_path_factory.mktemp("studies")
    url = f"sqlite:///{folder / 'studies.db'}"
    spec = folder / "curves.yaml"
    spec.write_text(CURVES_SPEC % (ROOT / "tests" / "objectives" / "learning.py"))
    runs = [(spec, 5, 120)]
    if _has_tensorflow():
        runs += [(_shrunk(example, spec_name, 4, folder), None, 300)
                 for example, spec_name in (("digits", "spec.yaml"), ("jets", "pareto.yaml"))]
    # side by side (the Keras studies spend most of their time importing TensorFlow, one
    # core each), three jobs writing one new SQLite file at once as users' jobs do
    with ThreadPoolExecutor(len(runs)) as pool:
        for done in [pool.submit(mpiopt, "search", path, "--storage", url, np=np, cwd=folder,
                                 check=True, timeout=timeout) for path, np, timeout in runs]:
            done.result()
    return url


def _shrunk(example: str, spec_name: str, trials: int, folder: Path) -> Path:
    """An example's spec with absolute file references, a few trials of 2 epochs, 2 folds,
    one rank."""
    source = ROOT / "examples" / example
    data = yaml.safe_load((source / spec_name).read_text())
    obj = data["objective"]
    obj["model"] = str(source / obj["model"])
    obj["data"]["loader"] = str(source / obj["data"]["loader"])
    data["search"].update(algorithm="random", trials=trials, seed=4)
    data["search"].pop("bayesian", None)
    data["training"].update(epochs=2, kfold=2)
    data["training"].pop("pruning", None)
    data["resources"] = {"group_size": 1}
    path = folder / f"{example}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _has_tensorflow() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorflow") is not None


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("chromium not found: install Debian's chromium (.ci/ensure-chromium does)",
                pytrace=False)


def browse(page: Path, *flags: str) -> subprocess.CompletedProcess:
    """Load `page` in headless chromium (10 s of virtual time for the plots to draw)."""
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--enable-unsafe-swiftshader", "--hide-scrollbars", "--virtual-time-budget=10000",
           f"--user-data-dir={page.parent / 'chromium-profile'}", *flags, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def console_errors(stderr: str) -> list[str]:
    """What the page wrote to the console (console.log/warn/error, uncaught exceptions)."""
    return [line for line in stderr.splitlines()
            if ":CONSOLE" in line and not BROWSER_NOISE.search(line)]


def drawn_plots(dom: str) -> dict[str, int]:
    """{plot div id: how many plotly SVG layers it holds} in the rendered DOM."""
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'<div id="(plot-[a-z]+)"', dom)]
    ends = [s for s, _ in starts[1:]] + [len(dom)]
    return {name: dom[s:e].count('class="main-svg"') for (s, name), e in zip(starts, ends)}


def report(url: str, study: str, out: Path) -> Path:
    proc = mpiopt("report", study, "--storage", url, "-o", out, check=True)
    assert f"wrote {out}" in proc.stderr and proc.stdout == ""
    return out


def test_the_console_check_catches_errors(tmp_path):
    """The browser check itself: a page that throws is caught (so a clean run means clean)."""
    page = tmp_path / "broken.html"
    page.write_text('<html><body><script>console.error("bad"); throw new Error("boom");'
                    "</script></body></html>")
    errors = console_errors(browse(page, "--enable-logging=stderr", "--v=0", "--dump-dom").stderr)
    assert any("bad" in e for e in errors) and any("Uncaught Error: boom" in e for e in errors)


@pytest.mark.parametrize("study", ["curves", "digits", "jets-pareto"])
def test_report_loads_offline_in_a_browser_with_every_plot_drawn(studies, study, tmp_path):
    if study != "curves" and not _has_tensorflow():
        pytest.skip("tensorflow is not installed (the tensorflow extra)")
    page = report(studies, study, tmp_path / f"{study}.html")
    text = page.read_text(encoding="utf-8")
    from plotly.offline import get_plotlyjs

    plotly_js = get_plotlyjs()
    assert plotly_js in text                             # inlined, whole
    rest = text.replace(plotly_js, "")
    assert not re.search(r"src=|href=|https?://", rest)   # nothing else to fetch
    assert len(rest) < 200_000, "the page beyond plotly.js should stay small"
    shot = tmp_path / "shot.png"
    proc = browse(page, "--enable-logging=stderr", "--v=0", "--dump-dom",
                  "--window-size=1000,1400", f"--screenshot={shot}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert console_errors(proc.stderr) == []
    from matplotlib.image import imread

    pixels = imread(shot)                    # what a person sees is not a blank page
    assert pixels.shape[:2] == (1400, 1000) and pixels[..., :3].std() > 0.05
    drawn = drawn_plots(proc.stdout)
    expected = set(KINDS) - {"folds"} if study == "curves" else set(KINDS)
    if study == "jets-pareto":           # two objectives: the front and its hypervolume
        expected |= {"pareto", "hypervolume"}
    assert {k.removeprefix("plot-") for k in drawn} == expected
    assert all(n > 0 for n in drawn.values()), drawn
    if study == "curves":
        assert "deliberate failure for x &lt; -3" in proc.stdout          # the failures table
        assert "no trial has per-fold values" in proc.stdout
    efficiency = re.search(r'id="efficiency">([\d.]+)%<', proc.stdout)
    assert efficiency and 0 < float(efficiency.group(1)) <= 100


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_plot_writes_every_kind(studies, tmp_path, fmt):
    from mpiopt.cli.main import main

    magic = {"png": b"\x89PNG", "svg": b"<?xml"}[fmt]
    for kind in KINDS:
        out = tmp_path / f"{kind}.{fmt}"
        assert main(["plot", kind, "curves", "--storage", studies, "-o", str(out)]) == 0
        # (an SVG's text is text: a plot with only its note is under 2 kB)
        assert out.read_bytes().startswith(magic), kind
        assert out.stat().st_size > {"png": 5000, "svg": 1500}[fmt], kind
        if fmt == "svg":
            assert b"<text" in out.read_bytes(), kind
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{k}.{fmt}" for k in KINDS)


def test_plot_of_nothing_to_draw_says_why(studies, tmp_path):
    out = tmp_path / "folds.png"
    proc = mpiopt("plot", "folds", "curves", "--storage", studies, "-o", out, check=True)
    assert "mpiopt: note: folds: no trial has per-fold values" in proc.stderr and out.exists()


@pytest.mark.parametrize("args, named", [
    (("plot", "bogus", "curves", "-o", "x.png"), "unknown plot kind 'bogus'"),
    (("plot", "history", "curves", "-o", "x.pdf"), "x.pdf: expected a .png or .svg"),
    (("plot", "history", "nosuch", "-o", "x.png"), "unknown study 'nosuch'"),
    (("report", "curves", "-o", "x.txt"), "x.txt: expected a .html"),
    (("report", "nosuch", "-o", "x.html"), "unknown study 'nosuch'"),
    (("report", "curves", "-o", "missing/x.html"), "folder missing does not exist"),
    (("export", "nosuch", "--format", "chrome-trace", "-o", "t.json"), "unknown study 'nosuch'"),
])
def test_bad_input_is_one_line_exit_2_nothing_written(studies, tmp_path, args, named):
    proc = mpiopt(*args, "--storage", studies, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and named in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [("report", "s", "-o", "s.html"),
                                     ("plot", "history", "s", "-o", "s.png")])
def test_a_missing_database_is_one_line_and_never_created(tmp_path, command):
    path = tmp_path / "absent.db"
    proc = mpiopt(*command, "--storage", f"sqlite:///{path}", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "absent.db" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_chrome_trace_of_a_four_group_study(studies, tmp_path):
    out = tmp_path / "trace.json"
    mpiopt("export", "curves", "--storage", studies, "--format", "chrome-trace", "-o", out,
           check=True)
    trace = json.loads(out.read_text())
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(n for n in names.values() if n.startswith("group")) == \
        ["group 0", "group 1", "group 2", "group 3"]
    trials = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "trial"]
    assert len(trials) == 20 and {e["pid"] for e in trials} == {1}
    from mpiopt.storage import open_storage

    with open_storage(studies, read_only=True) as st:
        group_of = {t.number: t.group for t in st.get_trials(st.get_study("curves").id)}
    for e in trials:          # each trial on its own group's track
        assert names[e["tid"]] == f"group {group_of[int(e['name'].split()[1])]}"
        assert isinstance(e["ts"], int) and e["ts"] >= 0 and e["dur"] >= 0
    for tid in {e["tid"] for e in trials}:       # a group runs one trial at a time
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in trials if e["tid"] == tid)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_cli_start_does_not_import_plotting_libraries():
    code = ("import sys, mpiopt.cli.main as m; m.build_parser(); "
            "print([x for x in ('plotly', 'matplotlib', 'pandas', 'sklearn') if x in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=subprocess_env(), check=True)
    assert proc.stdout.strip() == "[]"


def test_report_of_a_running_study_reads_only(tmp_path):
    """While the coordinator holds a write transaction, the report reads the last commit
    (SQLite WAL) and changes no byte of the database."""
    import hashlib
    import sqlite3

    from mpiopt.cli.main import main
    from mpiopt.storage import open_storage
    from mpiopt.trial import TrialStatus

    path = tmp_path / "live.db"
    url = f"sqlite:///{path}"
    with open_storage(url, create=True) as st:
        sid = st.create_study("live", "minimize", "value", "study: {name: live}", "0" * 64, "{}")
        for n in range(5):
            t = st.create_trial(sid, {"x": n / 5, "y": n % 2}, seed=n, group=n % 2)
            st.finish_trial(t.id, TrialStatus.COMPLETE, value=float(n), duration=0.1)
        st.create_trial(sid, {"x": 0.9, "y": 1}, seed=9, group=0)          # still running
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                  for p in tmp_path.iterdir() if p.name.startswith("live.db")}
        out = tmp_path / "live.html"
        assert main(["report", "live", "--storage", url, "-o", str(out)]) == 0
        after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                 for p in tmp_path.iterdir() if p.name.startswith("live.db")}
        assert after == before
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    page = out.read_text(encoding="utf-8")
    assert "6 trials: 1 running, 5 complete" in page and 'id="plot-timeline"' in page
