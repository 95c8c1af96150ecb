"""`mpiopt dashboard` in a real headless Chromium, against a study that is running.

The browser is driven through the DevTools protocol over a pipe (--remote-debugging-pipe:
JSON messages on file descriptors 3 and 4, no extra package), so a test can read the live
page as it changes: a trial that finishes shows up without a reload. Also: every string
from the database is shown as text (a study, a parameter, a value and an error holding
markup), the database is never written, and the server listens on 127.0.0.1 unless asked.
Like test_report.py, a missing browser FAILS these tests (.ci/ensure-chromium installs it).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import queue
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import BIN, mpiopt, subprocess_env
from test_report import chromium

SLOW = '''
import time
from pathlib import Path


def slow(params, report):
    """Each trial waits for the test to open the gate (a file; at most 5 minutes), then
    reports 5 epochs 0.1 s apart; x < -3 fails."""
    end = time.monotonic() + 300
    while not Path(__file__).with_name("gate").exists():
        if time.monotonic() > end:
            raise RuntimeError("the test never opened the gate")
        time.sleep(0.05)
    if params["x"] < -3:
        raise RuntimeError("deliberate failure for x < -3")
    for epoch in range(1, 6):
        time.sleep(0.1)
        report(epoch, (params["x"] - 1) ** 2 + 1.0 / epoch)
    return (params["x"] - 1) ** 2
'''
SPEC = """
study: {name: slow}
objective: {function: %s:slow, metric: loss, direction: minimize}
search_space:
  x: {type: real, low: -5.0, high: 5.0}
  kind: [a, b]
search: {algorithm: random, trials: 8, seed: 5}
"""
WAIT_S = 120      # a bound on each wait for the page, never a timing assertion


# ---- a browser driven through the DevTools protocol on a pipe ---------------------------
class Browser:
    """Headless Chromium with one page; `js(expr)` evaluates in it and returns the value."""

    def __init__(self, folder: Path, width: int = 1200):
        to_chrome, self._w = os.pipe()
        self._r, from_chrome = os.pipe()

        def fds():            # the protocol's pipe is the child's fd 3 (in) and 4 (out):
            # copied above 4 first, since a pipe end may already sit at 3 or 4 (dup2 onto
            # itself would leave it close-on-exec, or the first dup2 overwrite the other)
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_chrome, from_chrome)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--enable-unsafe-swiftshader", "--remote-debugging-pipe",
               f"--user-data-dir={folder / 'chromium-profile'}", f"--window-size={width},1600",
               "about:blank"]
        self.proc = subprocess.Popen(cmd, preexec_fn=fds, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, close_fds=False)
        os.close(to_chrome)
        os.close(from_chrome)
        self._ids, self._answers, self.events = 0, queue.Queue(), []
        threading.Thread(target=self._read, daemon=True).start()
        target = next(t for t in self._call("Target.getTargets")["targetInfos"]
                      if t["type"] == "page")
        self.session = self._call("Target.attachToTarget", targetId=target["targetId"],
                                  flatten=True)["sessionId"]
        self._call("Runtime.enable", session=True)
        self._call("Page.enable", session=True)

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._r, 1 << 16):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                if "id" in message:
                    self._answers.put(message)
                else:
                    self.events.append(message)

    def _call(self, method: str, session: bool = False, **params) -> dict:
        self._ids += 1
        message = {"id": self._ids, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._w, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._answers.get(timeout=WAIT_S)
            if answer["id"] == self._ids:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def open(self, url: str) -> None:
        self._call("Page.navigate", session=True, url=url)

    def js(self, expression: str):
        result = self._call("Runtime.evaluate", session=True, expression=expression,
                            returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str):
        """Poll until `expression` is truthy (bounded by WAIT_S: the test fails, never hangs)."""
        end = time.monotonic() + WAIT_S
        while time.monotonic() < end:
            try:
                if self.js(f"!!({expression})"):
                    return
            except RuntimeError:       # (the page is still loading: no body yet)
                pass
            time.sleep(0.2)
        pytest.fail(f"the page never showed {what} within {WAIT_S}s")

    def errors(self) -> list[str]:
        """Uncaught exceptions and console errors/warnings the page produced."""
        out = []
        for e in self.events:
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(json.dumps(e["params"]["exceptionDetails"])[:500])
            elif e.get("method") == "Runtime.consoleAPICalled" and \
                    e["params"]["type"] in ("error", "warning", "assert"):
                out.append(json.dumps(e["params"]["args"])[:500])
        return out

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self._w)


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path)
    yield b
    b.close()


# ---- the server as a user starts it ------------------------------------------------------
class Dashboard:
    def __init__(self, url: str, *args: str):
        cmd = [str(BIN / "mpiopt"), "dashboard", "--storage", url, "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=subprocess_env())
        self.line = self.proc.stdout.readline()      # the address it serves
        assert "http://" in self.line, self.line + self.proc.stderr.read()
        self.address = self.line.split("at ", 1)[1].split()[0]

    def get(self, path: str, method: str = "GET", host: str | None = None):
        request = urllib.request.Request(self.address.rstrip("/") + path, method=method)
        if host:
            request.add_header("Host", host)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def stop(self) -> str:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=30)
        return err


@pytest.fixture
def serve():
    started = []

    def start(url, *args):
        started.append(Dashboard(url, *args))
        return started[-1]

    yield start
    for d in started:
        if d.proc.poll() is None:
            d.stop()


def _running_study(tmp_path):
    """`mpiopt search` of slow trials, started: (its process, the storage URL)."""
    (tmp_path / "slow.py").write_text(SLOW)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC % (tmp_path / "slow.py"))
    url = f"sqlite:///{tmp_path / 'live.db'}"
    proc = subprocess.Popen([str(BIN / "mpiopt"), "search", str(spec), "--storage", url],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=subprocess_env())
    first = proc.stdout.readline()          # "study 'slow': ...": the database is there
    assert first.startswith("study 'slow'"), first
    return proc, url


def test_a_trial_that_finishes_shows_up_without_a_reload(tmp_path, browser, serve):
    search, url = _running_study(tmp_path)
    try:
        dash = serve(url)
        browser.open(dash.address + "#study=slow")
        browser.wait_for("document.body.dataset.polls >= 1", "a first update")
        browser.js("window.sameDocument = 'yes'")
        browser.wait_for("document.querySelector('#trial-table tbody tr.RUNNING')",
                         "a running trial")
        assert browser.js("document.querySelectorAll('#trial-table tbody tr.COMPLETE').length") == 0
        (tmp_path / "gate").touch()              # the first trial may finish now
        browser.wait_for("document.querySelector('#trial-table tbody tr.COMPLETE')",
                         "a complete trial")
        assert browser.js("window.sameDocument") == "yes"          # no reload
        browser.wait_for("document.querySelector('#plot-history .main-svg')", "the history")
        assert search.wait(timeout=WAIT_S) == 0
        browser.wait_for("document.querySelectorAll('#trial-table tbody tr.COMPLETE').length"
                         " + document.querySelectorAll('#trial-table tbody tr.FAILED').length"
                         " == 8", "every trial finished")
        assert browser.js("window.sameDocument") == "yes"
        assert "complete" in browser.js("document.getElementById('study-meta').textContent")
        jobs = browser.js("document.getElementById('study-jobs').textContent")
        assert jobs.startswith("job 1 \u00b7 ") and jobs.endswith("ended"), jobs
        _sort_filter_and_detail(browser)
        assert browser.errors() == []
    finally:
        if search.poll() is None:
            search.kill()
        search.communicate(timeout=60)


def _sort_filter_and_detail(browser) -> None:
    column = ("[...document.querySelectorAll('#trial-table tbody tr')].map(r => "
              "r.children[2].textContent)")
    browser.js("document.querySelector('#trial-table th[data-key=value]').click()")
    values = [float(v) for v in browser.js(column) if v != "-"]
    assert values == sorted(values) and len(values) >= 2
    browser.js("document.querySelector('#trial-table th[data-key=value]').click()")
    values = [float(v) for v in browser.js(column) if v != "-"]
    assert values == sorted(values, reverse=True)
    browser.js("{const s = document.getElementById('status-filter'); s.value = 'FAILED';"
               "s.dispatchEvent(new Event('change'))}")
    statuses = browser.js("[...document.querySelectorAll('#trial-table tbody tr')]"
                          ".map(r => r.children[1].textContent)")
    assert set(statuses) <= {"FAILED"}
    browser.js("{const s = document.getElementById('status-filter'); s.value = '';"
               "s.dispatchEvent(new Event('change'))}")
    browser.js("{const f = document.getElementById('filter'); f.value = 'COMPLETE';"
               "f.dispatchEvent(new Event('input'))}")
    statuses = browser.js("[...document.querySelectorAll('#trial-table tbody tr')]"
                          ".map(r => r.children[1].textContent)")
    assert statuses and set(statuses) == {"COMPLETE"}
    browser.js("document.querySelector('#trial-table tbody tr').click()")
    browser.wait_for("document.querySelector('#trial-curve .main-svg')", "a trial's curve")
    assert "epoch" in browser.js("document.getElementById('detail').textContent")


# ---- escaping -------------------------------------------------------------------------------
EVIL_STUDY = "<script>window.evil='study'</script>"
EVIL_PARAM = "<img src=x onerror=\"window.evil='param'\">"
EVIL_VALUE = "<b onmouseover=\"window.evil='value'\">v</b>"
EVIL_JOB = "<script>window.evil='job'</script>"
EVIL_ERROR = "boom <script>window.evil='error'</script> <img src=y onerror=\"window.evil='error'\">"


def _evil_database(tmp_path) -> str:
    from mpiopt.storage import open_storage
    from mpiopt.trial import TrialStatus

    url = f"sqlite:///{tmp_path / 'evil.db'}"
    with open_storage(url, create=True) as st:
        sid = st.create_study(EVIL_STUDY, "minimize", "<i>loss</i>", "study: {name: x}", "0" * 64,
                              json.dumps({EVIL_PARAM: {"type": "categorical",
                                                       "choices": [EVIL_VALUE, "plain"]}}))
        for k in range(5):
            t = st.create_trial(sid, {EVIL_PARAM: EVIL_VALUE if k % 2 else "plain"}, seed=k, group=0,
                                host="<u>host</u>")
            if k == 4:
                st.finish_trial(t.id, TrialStatus.FAILED, error=EVIL_ERROR, duration=1.0)
            else:
                st.finish_trial(t.id, TrialStatus.COMPLETE, value=float(k), duration=1.0,
                                intermediate={1: k + 1.0, 2: float(k)})
        job = st.join_study(sid, "<u>host</u>", 1, 30.0, launcher=EVIL_JOB)
        st.end_job(job.id, job.token)
        plain = st.create_study("plain", "maximize", "acc", "study: {name: plain}", "1" * 64, "{}")
        st.finish_trial(st.create_trial(plain, {"x": 1.0}, seed=0, group=0).id,
                        TrialStatus.COMPLETE, value=0.5, duration=1.0)
    return url


def test_markup_from_the_database_is_shown_as_text(tmp_path, browser, serve):
    dash = serve(_evil_database(tmp_path))
    browser.open(dash.address)
    browser.wait_for("document.body.dataset.polls >= 1 && "
                     "document.querySelector('#plot-history .main-svg')", "the evil study")
    browser.js("document.querySelector('#trial-table tbody tr[data-number=\"4\"]').click()")
    browser.wait_for("document.getElementById('trial-error')", "the error")
    browser.js("document.querySelector('#trial-table tbody tr[data-number=\"3\"]').click()")
    browser.wait_for("document.querySelector('#trial-curve .main-svg')", "the curve")
    browser.js("document.querySelector('#trial-table tbody tr[data-number=\"4\"]').click()")
    browser.wait_for("document.getElementById('trial-error')", "the error again")
    assert browser.js("window.evil === undefined")
    assert browser.js("document.querySelectorAll('main script, main img, main b, main u').length") == 0
    assert browser.js("document.getElementById('study-name').textContent") == f"Study {EVIL_STUDY}"
    assert browser.js("document.getElementById('trial-error').textContent") == EVIL_ERROR
    assert EVIL_JOB in browser.js("document.getElementById('study-jobs').textContent")
    header = browser.js("[...document.querySelectorAll('#trial-table th')].map(h => h.textContent)")
    assert EVIL_PARAM in header
    assert EVIL_VALUE in browser.js("document.querySelector('#trial-table tbody').textContent")
    status, body = dash.get("/api/study?name=" + urllib.request.quote(EVIL_STUDY))
    figures = json.dumps(json.loads(body)["figures"])
    assert status == 200 and "<img" not in figures and "&lt;img src=x" in figures
    # another study: by a click on its row, and by the address (no reload either way)
    browser.js("window.sameDocument = 'yes'")
    browser.js("document.querySelector('#studies tr[data-study=\"plain\"]').click()")
    browser.wait_for("document.getElementById('study-name').textContent == 'Study plain'", "plain")
    browser.open(dash.address + "#study=" + urllib.request.quote(EVIL_STUDY) + "&trial=4")
    browser.wait_for("document.getElementById('study-name').textContent.includes('evil')"
                     " && document.getElementById('trial-error')", "the evil study by address")
    assert browser.js("window.sameDocument") == "yes" and browser.js("window.evil === undefined")
    assert browser.errors() == []


# ---- the database is only read; the address is local -------------------------------------
def _files(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()
            if p.is_file()}


def test_the_database_is_never_written(tmp_path, serve):
    url = _evil_database(tmp_path)
    before = _files(tmp_path)
    dash = serve(url)
    paths = ["/", "/app.js", "/api/studies", "/api/study?name=" + urllib.request.quote(EVIL_STUDY),
             "/api/trial?study=" + urllib.request.quote(EVIL_STUDY) + "&number=1"]
    for path in paths:
        status, _ = dash.get(path)
        assert status == 200, path
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, _ = dash.get("/api/studies", method=method)
        assert status == 501, method
    assert dash.get("/api/study?name=nosuch")[0] == 404
    assert dash.get("/api/trial?study=x&number=one")[0] == 400
    dash.stop()
    after = _files(tmp_path)
    assert after.pop("evil.db") == before.pop("evil.db")     # not a byte changed
    # (a reader of a WAL database keeps SQLite's shared-memory index beside it, and an
    # empty log: no write went through it)
    assert set(after) <= {"evil.db-shm", "evil.db-wal"} and before == {}
    assert not (tmp_path / "evil.db-wal").exists() or (tmp_path / "evil.db-wal").stat().st_size == 0


def test_it_listens_on_this_machine_only_unless_asked(tmp_path, serve):
    url = _evil_database(tmp_path)
    local = serve(url)
    assert local.address.startswith("http://127.0.0.1:")
    assert local.get("/api/studies")[0] == 200
    # a page elsewhere, through a DNS name rebound to 127.0.0.1, is refused
    assert local.get("/api/studies", host="attacker.example:80")[0] == 403
    assert "warning" not in local.stop()
    wide = serve(url, "--host", "0.0.0.0")
    assert wide.address.startswith("http://0.0.0.0:")
    port = int(wide.address.rsplit(":", 1)[1].strip("/"))
    with socket.create_connection(("127.0.0.1", port), timeout=30):
        pass
    err = wide.stop()
    assert err.count("mpiopt: warning: the dashboard listens on 0.0.0.0") == 1, err


def test_the_default_address_is_loopback(tmp_path):
    from mpiopt.reporting.dashboard import make_server
    from mpiopt.storage import open_storage

    url = _evil_database(tmp_path)
    with open_storage(url, read_only=True) as storage:
        server = make_server(storage, url, port=0)
        try:
            assert server.server_address[0] == "127.0.0.1"
        finally:
            server.server_close()


@pytest.mark.parametrize("args, named", [
    (("--port", "70000"), "must be 0 to 65535"),
    (("--storage", "sqlite:///nofolder/missing.db"), "nofolder"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, named):
    proc = mpiopt("dashboard", *args, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "" and named in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


# ---- a big study does not keep the database busy -----------------------------------------
class SlowStorage:
    """A study whose trials take `cost` seconds (of the fake clock) to read."""

    def __init__(self, clock, cost: float):
        from datetime import datetime, timezone

        from mpiopt.storage import StudyRecord
        from mpiopt.trial import FrozenTrial, StudyStatus, TrialStatus

        now = datetime.now(timezone.utc)
        self.record = StudyRecord(1, "big", "minimize", "loss", "study: {name: big}", "0" * 64,
                                  "{}", StudyStatus.RUNNING, now, now)
        self.trials = [FrozenTrial(id=1, study_id=1, number=0, status=TrialStatus.RUNNING,
                                   params={"x": 1.0})]
        self.clock, self.cost, self.reads = clock, cost, 0

    def get_study(self, name):
        return self.record

    def count_trials(self, study_id):
        from collections import Counter

        return Counter(t.status for t in self.trials)

    def list_jobs(self, study_id):
        return []

    def get_trials(self, study_id):
        self.reads += 1
        self.clock.now += self.cost
        return list(self.trials)

    def finish(self):
        from dataclasses import replace

        from mpiopt.trial import TrialStatus

        self.trials = [replace(self.trials[0], status=TrialStatus.COMPLETE, value=1.0)]


class FakeClock:
    now = 100.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("cost", [0.01, 10.0])
def test_a_study_is_read_again_when_it_changed_and_as_often_as_its_cost_allows(cost):
    from mpiopt.reporting.dashboard import POLL_S, SPARE, Studies

    clock = FakeClock()
    storage = SlowStorage(clock, cost)
    studies = Studies(storage, "sqlite:///big.db", clock=clock)
    first = studies.study("big")
    assert storage.reads == 1 and [r["status"] for r in first["rows"]] == ["RUNNING"]
    clock.now += POLL_S / 2
    again = studies.study("big", first["version"], first["rows_version"])
    assert storage.reads == 1 and "rows" not in again and "figures" not in again
    storage.finish()                       # a trial finished: read at once (its cost allowing)
    clock.now += cost
    done = studies.study("big", first["version"], first["rows_version"])
    assert storage.reads == 2 and [r["status"] for r in done["rows"]] == ["COMPLETE"]
    clock.now += max(POLL_S, SPARE * cost) - cost - 1e-6        # unchanged: not yet
    studies.study("big", done["version"], done["rows_version"])
    assert storage.reads == 2
    clock.now += 1e-3                                            # (running trials' epochs)
    studies.study("big", done["version"], done["rows_version"])
    assert storage.reads == 3


def test_sigterm_stops_it_even_where_the_parent_ignored_the_signal(tmp_path):
    """An ignored SIGTERM is inherited across exec (a batch script's `trap '' TERM`, a
    parent that leaves signals to another process): the dashboard still stops on it."""
    import signal

    url = _evil_database(tmp_path)
    proc = subprocess.Popen(
        [str(BIN / "mpiopt"), "dashboard", "--storage", url, "--port", "0"], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
    try:
        assert "read-only" in proc.stdout.readline()     # it serves
        proc.terminate()
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---- the dashboard shows what the report shows, and says what it shows (issue 62) ----------
def _study_database(tmp_path, name: str, objective: str, rows, space: dict,
                    error: str | None = None) -> str:
    """A study written through the Storage API: rows of (params, value, metrics); a last
    FAILED trial with `error` when given."""
    from mpiopt.storage import open_storage
    from mpiopt.trial import TrialStatus

    url = f"sqlite:///{tmp_path / (name + '.db')}"
    spec = (f"study: {{name: {name}}}\nobjective: {{function: f.py:f, {objective}}}\n"
            "search: {algorithm: random, trials: 40}\n")
    with open_storage(url, create=True) as st:
        metric = "val_accuracy" if "val_accuracy" in objective else "loss"
        sid = st.create_study(name, "maximize" if "maximize" in objective else "minimize",
                              metric, spec, "0" * 64, json.dumps(space))
        for k, (params, value, metrics) in enumerate(rows):
            t = st.create_trial(sid, params, seed=k, group=k % 2, host="node1")
            st.finish_trial(t.id, TrialStatus.COMPLETE, value=value, duration=1.0 + k,
                            metrics=metrics, intermediate={1: value + 1, 2: value})
        if error:
            t = st.create_trial(sid, rows[0][0], seed=99, group=0, host="node1")
            st.finish_trial(t.id, TrialStatus.FAILED, error=error, duration=1.0)
    return url


XY = {"x": {"type": "real", "low": 0.0, "high": 1.0},
      "lr": {"type": "real", "low": 1e-4, "high": 1e-1, "prior": "log-uniform"}}


def test_a_study_of_several_objectives_shows_its_front_and_hypervolume(tmp_path, browser, serve):
    rows = [({"x": k / 10, "lr": 10 ** -(1 + k % 3)}, (k - 4) ** 2 / 10,
             {"loss": (k - 4) ** 2 / 10, "cost": 9 - k}) for k in range(9)]
    url = _study_database(tmp_path, "front", "metrics: {loss: minimize, cost: minimize}", rows, XY)
    dash = serve(url)
    browser.open(dash.address + "#study=front")
    browser.wait_for("document.querySelector('#plot-pareto .main-svg') && "
                     "document.querySelector('#plot-hypervolume .main-svg')",
                     "the Pareto front and its hypervolume")
    titles = browser.js("[...document.querySelectorAll('#figures h2')].map(h => h.textContent)")
    assert titles[1].startswith("Pareto front") and titles[2].startswith("Hypervolume"), titles
    assert browser.errors() == []


def test_the_contour_says_it_is_a_prediction_and_an_outlier_gets_a_log_axis(tmp_path, browser,
                                                                             serve):
    rows = [({"x": k / 12, "lr": 10 ** -(1 + k % 3)}, 0.1 + k / 100, {}) for k in range(12)]
    rows[5] = (rows[5][0], 1000.0, {})                      # one diverged trial
    dash = serve(_study_database(tmp_path, "outlier", "metric: loss, direction: minimize",
                                 rows, XY))
    browser.open(dash.address + "#study=outlier")
    browser.wait_for("document.querySelector('#plot-contour .main-svg') && "
                     "document.querySelector('#plot-history .main-svg')", "the figures")
    contour = browser.js("document.getElementById('fig-contour').textContent")
    assert "predicted by a random forest" in contour and "a model's prediction" in contour
    assert browser.js("document.getElementById('plot-contour').data[0].colorbar.title.text") \
        == "predicted loss"
    assert browser.js("document.getElementById('plot-history').layout.yaxis.type") == "log"
    caption = browser.js("document.querySelector('#fig-history .caption').textContent")
    assert caption.startswith("log scale: 1 outlier(s) would squeeze the other 11"), caption
    assert browser.errors() == []


DIGITS = {"width": {"type": "integer", "low": 16, "high": 128},
          "depth": {"type": "integer", "low": 1, "high": 3},
          "learning_rate": {"type": "real", "low": 1e-4, "high": 3e-2, "prior": "log-uniform"},
          "dropout": {"type": "real", "low": 0.0, "high": 0.5},
          "activation": {"type": "categorical", "choices": ["relu", "tanh", "elu"]}}
LONG_ERROR = ("RuntimeError: the model diverged at epoch 3 of fold 2: the validation loss "
              "became nan after the learning rate warm-up ended (rank 2 on node17)\n"
              "Traceback (most recent call last): ...")


def test_the_trials_table_fits_a_window_of_1280_px(tmp_path, serve):
    """The digits example's table (5 parameters, the Keras metrics, an error) in a 1280 px
    window: every column in view, no header broken inside a word, the error cut to its
    first line with the whole of it in the tooltip."""
    rows = [({"width": 16 + 7 * k, "depth": 1 + k % 3, "learning_rate": 10 ** -(2 + k / 7),
              "dropout": k / 30, "activation": ("relu", "tanh", "elu")[k % 3]},
             0.9 + k / 1000, {"val_accuracy": 0.9 + k / 1000, "val_loss": 0.31234 - k / 100,
                              "accuracy": 0.95123 + k / 1000, "loss": 0.2 - k / 1000,
                              "best_epoch": 4 + k % 2})
            for k in range(12)]
    url = _study_database(tmp_path, "digits", "metric: val_accuracy, direction: maximize",
                          rows, DIGITS, error=LONG_ERROR)
    dash = serve(url)
    wide = Browser(tmp_path, width=1280)
    try:
        wide.open(dash.address + "#study=digits")
        wide.wait_for("document.querySelectorAll('#trial-table tbody tr').length == 13",
                      "the trials")
        box = wide.js("(b => [b.scrollWidth, b.clientWidth])"
                      "(document.querySelector('#trials .scroll'))")
        assert box[0] <= box[1], f"the table is {box[0]} px wide in a box of {box[1]} px"
        assert "scroll it sideways" not in wide.js(
            "document.getElementById('trial-count').textContent")
        broken = wide.js(r"""[...document.querySelectorAll('#trial-table th')].flatMap(th => {
            const out = [];
            for (const node of th.childNodes) {
              if (node.nodeType !== Node.TEXT_NODE) continue;
              const range = document.createRange();
              range.selectNodeContents(node);
              if (range.getClientRects().length > 1) out.push(node.textContent);
            }
            return out; })""")
        assert broken == [], f"header words broken across lines: {broken}"
        cell = wide.js("(c => [c.title, c.firstChild.scrollWidth > c.firstChild.clientWidth])"
                       "(document.querySelector('#trial-table tbody tr.FAILED td.error'))")
        assert cell[0] == LONG_ERROR.splitlines()[0] and cell[1]      # cut, whole in the tooltip
        assert wide.errors() == []
    finally:
        wide.close()


def test_it_starts_before_the_database_exists_and_shows_the_study_once_made(tmp_path, browser,
                                                                           serve):
    (tmp_path / "slow.py").write_text(SLOW)
    (tmp_path / "gate").touch()
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC % (tmp_path / "slow.py"))
    url = f"sqlite:///{tmp_path / 'later.db'}"
    dash = serve(url)
    browser.open(dash.address)
    browser.wait_for("document.body.dataset.polls >= 1", "a first update")
    waiting = browser.js("(w => !w.hidden && w.textContent)(document.getElementById('waiting'))")
    assert waiting and "no database at" in waiting and "later.db" in waiting
    browser.js("window.sameDocument = 'yes'")
    mpiopt("search", spec, "--storage", url, np=3, cwd=tmp_path, check=True, timeout=240)
    browser.wait_for("document.querySelector('#studies tr[data-study=\"slow\"]') && "
                     "document.querySelectorAll('#trial-table tbody tr').length == 8",
                     "the study once a job made it")
    assert browser.js("document.getElementById('waiting').hidden")
    assert browser.js("window.sameDocument") == "yes"
    assert browser.errors() == []


FAST = '''
import time


def fast(params, report):
    time.sleep(0.25)
    report(1, params["x"] ** 2)
    return params["x"] ** 2
'''


def test_figures_behind_the_table_say_so(tmp_path, browser, serve):
    """Trials finish faster than the figures are redrawn (they fit a forest): whenever the
    history shows fewer complete trials than the table, a line says so, with both counts."""
    (tmp_path / "fast.py").write_text(FAST)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"study: {{name: fast}}\nobjective: {{function: {tmp_path / 'fast.py'}:fast}}\n"
                    "search_space:\n  x: {type: real, low: -1.0, high: 1.0}\n"
                    "search: {algorithm: random, trials: 200, seed: 1}\n")
    url = f"sqlite:///{tmp_path / 'fast.db'}"
    search = subprocess.Popen([str(BIN / "mpiopt"), "search", str(spec), "--storage", url],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=subprocess_env())
    try:
        assert search.stdout.readline().startswith("study 'fast'")
        dash = serve(url)
        browser.open(dash.address + "#study=fast")
        browser.wait_for("document.querySelector('#plot-history .main-svg')", "the history")
        seen, end = 0, time.monotonic() + WAIT_S
        while seen < 2 and time.monotonic() < end:
            table, drawn, lag = browser.js("""[
                document.querySelectorAll('#trial-table tbody tr.COMPLETE').length,
                document.getElementById('plot-history').data
                  .filter(t => (t.name || '').startsWith('complete'))
                  .reduce((n, t) => n + t.x.length, 0),
                (l => l && !l.hidden ? l.textContent : null)(document.getElementById('lag'))]""")
            if table != drawn:
                assert lag, f"the table has {table} complete trials, the history {drawn}: no word"
                assert f"{drawn} complete" in lag and f"{table} complete" in lag, lag
                seen += 1
            time.sleep(0.3)
        assert seen >= 2, "the figures never fell behind the table: the test saw nothing"
    finally:
        search.kill()
        search.communicate(timeout=60)
