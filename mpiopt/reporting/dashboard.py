"""`mpiopt dashboard`: every study of a database as a local web page that follows them live.

The page (dashboard_page.py) polls three JSON endpoints every POLL_S, so a trial that
finishes shows up without a reload:

    /api/studies                       every study: state, counts, best
    /api/study?name=S&rows=R&have=V    one study: its header, its trials' rows (when R is
                                       not their version) and the report's figures (when V
                                       is not theirs)
    /api/trial?study=S&number=N        one trial in full: params, curve, folds, error

The figures are the static report's (figures.panel drawn by plotly_figures.figure), and
plotly.js is the one the report inlines (plotly.offline.get_plotlyjs), served at
/plotly.js: nothing is fetched from the internet.

Rules, and why:
- Read-only: the database is opened as the query commands open it (read_only=True: never
  written, migrated or switched to another journal mode) and the server answers GET and
  HEAD only, so pointing it at a running study's database cannot disturb the study.
- Local: it listens on 127.0.0.1 unless another address is asked for (the CLI then warns:
  anyone who can reach that address reads every study, errors and host names included).
  On the loopback address a request whose Host header names another machine is refused:
  a web page elsewhere cannot read the studies through a DNS name rebound to 127.0.0.1.
- Escaped: what comes from the database (study, parameter and metric names, values,
  error texts) reaches the page as JSON and is put in as text (textContent), never as
  markup; the figures' strings are HTML-escaped because plotly reads a subset of HTML in
  its labels and hover texts. The Content-Security-Policy allows only this server's
  scripts, so a string that slipped through would still not run.
- Ready before the study: pointed at a SQLite file that does not exist yet (a job about to
  start, a tunnel opened first), it serves a page that says it waits, and opens the
  database once a job has created it: no restart, no reload.
- Cheap while a study runs: a study's trials are read again when a trial started or
  finished, or for running trials' epochs every poll, and its figures (a random-forest
  fit among them) rebuilt when its trials changed, each no more often than its own cost
  allows (Studies._snapshot); a page gets rows and figures only when they are new.
"""
from __future__ import annotations

import hashlib
import html
import math
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from mpiopt import jsontext
from mpiopt.errors import MpioptError

from mpiopt.trial import FrozenTrial, TrialStatus, resume_note

POLL_S = 2.0
FIGURES_EVERY_S = 5.0
SPARE = 5           # reads and figure builds take at most 1/SPARE of the server's time
MOST_METRICS = 8    # metrics shown as columns of the trials table
LOOPBACK = ("127.0.0.1", "localhost", "::1")
CSP = ("default-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
       "frame-ancestors 'none'")     # ('unsafe-eval': plotly's WebGL traces compile shaders)


class Studies:
    """What the page asks of the database, as JSON-ready dicts. One storage for every
    request, used by one request at a time (the server's threads share it)."""

    def __init__(self, storage, url: str, clock=time.monotonic):
        """`storage`: the database, or None while its SQLite file does not exist yet
        (opened read-only on the first request after a job created it)."""
        self.storage, self.url, self.clock = storage, url, clock
        self.lock = threading.Lock()          # the storage: one call at a time
        self.building = threading.Lock()      # a study's snapshot and figures
        self.figures: dict[str, tuple] = {}   # study -> (fingerprint, made, version, dict, cost)
        self.snapshots: dict[str, _Snapshot] = {}

    def _db(self):
        """The storage, opened once its file exists; MpioptError (the page's 404 with
        this text) until then. Called with self.lock held."""
        if self.storage is None:
            from mpiopt.storage import StorageURL, open_storage

            path = StorageURL.parse(self.url).sqlite_path
            if path is not None and not path.is_file():
                raise MpioptError(waiting_text(self.url))
            self.storage = open_storage(self.url, read_only=True)
        return self.storage

    def close(self) -> None:
        with self.lock:
            if self.storage is not None:
                self.storage.close()

    def studies(self) -> dict:
        from mpiopt.reporting.tables import liveness

        try:
            with self.lock:
                records = self._db().list_studies()
        except MpioptError as exc:
            if self.storage is not None:
                raise
            return {"poll_s": POLL_S, "studies": [], "waiting": str(exc)}
        return {"poll_s": POLL_S, "studies": [{
            "name": r.name, "status": r.status.value, "state": liveness(r, self.url)[0],
            "direction": r.direction, "metric": r.metric, "trials": sum(r.counts.values()),
            **{s.value.lower(): r.counts.get(s, 0) for s in TrialStatus},
            "best": r.best_value, "created": _iso(r.created_at)} for r in records]}

    def study(self, name: str, have: str | None = None, rows: str | None = None) -> dict:
        """The study's header, its rows unless `rows` names the snapshot the page holds,
        its figures unless `have` names theirs, and the jobs that ran it
        (mpiopt.reporting.jobs)."""
        from mpiopt.reporting.jobs import job_row
        from mpiopt.reporting.tables import liveness

        with self.lock:
            storage = self._db()
            record = storage.get_study(name)
            counts = storage.count_trials(record.id)
            jobs = storage.list_jobs(record.id)
        with self.building:         # (two pages at once: one read, one build)
            snap = self._snapshot(record, counts)
            version, figures = self._figures(record, snap)
        now = datetime.now(timezone.utc)
        out = {"name": record.name, "metric": record.metric, "direction": record.direction,
               "status": record.status.value, "state": liveness(record, self.url, now, jobs)[1],
               "jobs": [job_row(j, now) for j in jobs], **snap.head,
               "rows_version": snap.version}
        if rows != snap.version:
            out["rows"] = snap.rows
        out["version"] = version
        if have != version:
            out.update(figures)
        return out

    def _snapshot(self, record, counts) -> "_Snapshot":
        """The study's trials as last read: read again when the counts per status changed
        (a trial started or finished) or the last read is old (running trials' epochs),
        and in both cases no sooner than its own cost allows: a study of thousands of
        trials takes seconds to read, and a page polling every 2 s must not keep the
        database busy (at most 1/SPARE of the time reading, epochs of running trials
        then come at that pace)."""
        from mpiopt.reporting.view import StudyView

        key = (record.status.value, tuple(sorted((s.value, n) for s, n in counts.items())))
        old = self.snapshots.get(record.name)
        now = self.clock()
        if old is not None:
            age = now - old.made
            if age < old.cost or (old.key == key and age < max(POLL_S, SPARE * old.cost)):
                return old
        with self.lock:
            trials = self.storage.get_trials(record.id)
            jobs = self.storage.list_jobs(record.id)     # (the timeline's labels)
        view = StudyView.of(record, trials, jobs=jobs)
        snap = _Snapshot(key, now, self.clock() - now, view, f"{record.id}-{int(now * 1000)}",
                         _head(view), [_row(t) for t in view.trials])
        self.snapshots[record.name] = snap
        return snap

    def trial(self, name: str, number: int) -> dict:
        with self.lock:
            record = self._db().get_study(name)
            t = self.storage.get_trial(record.id, number)
        return {"study": record.name, "metric": record.metric, **_row(t),
                "value_std": t.value_std, "seed": t.seed, "host": t.host, "device": t.device,
                "started_at": _iso(t.started_at), "finished_at": _iso(t.finished_at),
                "error": t.error, "metrics": dict(t.metrics), "folds": list(t.fold_values),
                "curve": [[s.fold, s.epoch, v] for s, v in t.intermediate.items()],
                "member": t.member, "round": t.round, "parent": t.parent,
                "resumed": resume_note(t.spans)}

    def _figures(self, record, snap) -> tuple[str, dict]:
        """(version, {"figures", "hover"}): rebuilt when the trials changed, no sooner
        than FIGURES_EVERY_S or SPARE times the last build's cost after it (a forest is
        fitted for the importance and the contour)."""
        fingerprint = _fingerprint(record, snap.view.trials)
        cached = self.figures.get(record.name)
        now = self.clock()
        if cached and (cached[0] == fingerprint or
                       now - cached[1] < max(FIGURES_EVERY_S, SPARE * cached[4])):
            return cached[2], cached[3]
        built = _build_figures(snap.view)
        version = f"{fingerprint[:16]}-{int(now * 1000)}"
        self.figures[record.name] = (fingerprint, now, version, built, self.clock() - now)
        return version, built


def waiting_text(url: str) -> str:
    """What the page says while the database's file does not exist yet."""
    from mpiopt.storage import mask_url

    return (f"no database at {mask_url(url)} yet: waiting for a job to create it (mpiopt "
            "search SPEC --storage with this URL); its studies appear here when it does")


@dataclass(frozen=True)
class _Snapshot:
    key: tuple                 # the study's status and counts per status when read
    made: float
    cost: float                # seconds the read took
    view: object               # StudyView
    version: str
    head: dict
    rows: list


def _head(view) -> dict:
    return {"counts": {s.value.lower(): view.count(s) for s in TrialStatus},
            "params": [p.name for p in view.params],
            "metrics": sorted({k for t in view.trials for k in t.metrics})[:MOST_METRICS],
            "best": _best(view), "trials": len(view.trials), "now": _iso(view.now)}


def _build_figures(view) -> dict:
    """The report's panels (figures.page_panels) and hover texts (view.trial_hovers), with
    what they were drawn from: `drawn` counts the trials by status, so the page can say
    when its figures are older than its table."""
    from mpiopt.reporting.figures import page_panels
    from mpiopt.reporting.plotly_figures import figure
    from mpiopt.reporting.view import trial_hovers

    return {"figures": [{"kind": p.kind, "title": p.title, "note": p.note,
                         "caption": p.caption,
                         "figure": None if p.note is not None else escaped(figure(p))}
                        for p in page_panels(view)],
            "hover": {str(n): text for n, text in trial_hovers(view).items()},
            "drawn": {s.value.lower(): view.count(s) for s in TrialStatus}}


def escaped(value):
    """Every string in a plotly figure HTML-escaped (plotly draws a subset of HTML in its
    labels), non-finite numbers as null (JSON has no infinity); a line break the figure
    builders put in a title stays one."""
    if isinstance(value, str):
        return html.escape(value).replace("&lt;br&gt;", "<br>")
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [escaped(v) for v in value]
    return value


def _fingerprint(record, trials) -> str:
    """What the figures depend on: each trial's state, value and reports so far."""
    h = hashlib.sha256(record.status.value.encode())
    for t in trials:
        h.update(repr((t.number, t.status.value, t.value, t.attempt, len(t.intermediate),
                       t.finished_at)).encode())
    return h.hexdigest()


def _row(t: FrozenTrial) -> dict:
    error = (t.error or "").strip().splitlines()
    return {"number": t.number, "status": t.status.value, "value": t.value,
            "std": t.value_std, "group": t.group, "attempt": t.attempt,
            "duration": t.duration, "started": _iso(t.started_at),
            "params": {k: _plain(v) for k, v in t.params.items()},
            "epochs": len(t.intermediate), "error": error[0][:300] if error else None,
            "metrics": {k: v for k, v in t.metrics.items()}}


def _best(view) -> dict | None:
    """"Best" as everywhere (mpiopt.reporting.front): the best feasible trial, or with
    several objectives the Pareto front (no one trial is best)."""
    front = view.front
    if front.multi:
        return {"title": front.title(), "front": [t.number for t in front.trials]} \
            if front.trials else None
    top = front.best
    if top is None:
        return None
    return {"number": top.number, "value": top.value,
            "params": {k: _plain(v) for k, v in top.params.items()}}


def _plain(v):
    return v if isinstance(v, (str, int, bool)) or v is None else (
        v if isinstance(v, float) and math.isfinite(v) else str(v))


def _iso(when: datetime | None) -> str | None:
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.isoformat(timespec="seconds")


def to_json(value) -> bytes:
    return jsontext.dumps(value, default=str).encode("utf-8")


class Handler(BaseHTTPRequestHandler):
    """GET and HEAD only (anything else: 501, from http.server). `server.studies` is the
    Studies, `server.assets` {path: (content type, bytes)}."""

    server_version = "mpiopt-dashboard"

    def do_HEAD(self) -> None:
        self.do_GET(body=False)

    def do_GET(self, body: bool = True) -> None:
        if not self._host_ok():
            return self._send(403, "text/plain", b"forbidden: this dashboard serves its own "
                                                 b"address only\n", body)
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        asset = self.server.assets.get(url.path)
        if asset is not None:
            return self._send(200, asset[0], asset[1], body, cache=url.path != "/")
        try:
            data = self._api(url.path, query)
        except MpioptError as exc:
            return self._send(404, "application/json", to_json({"error": str(exc)}), body)
        except (KeyError, ValueError) as exc:
            return self._send(400, "application/json", to_json({"error": f"bad request: {exc}"}),
                              body)
        if data is None:
            return self._send(404, "application/json", to_json({"error": "no such page"}), body)
        self._send(200, "application/json", to_json(data), body)

    def _api(self, path: str, query: dict):
        studies = self.server.studies
        if path == "/api/studies":
            return studies.studies()
        if path == "/api/study":
            return studies.study(query["name"], query.get("have"), query.get("rows"))
        if path == "/api/trial":
            return studies.trial(query["study"], int(query["number"]))
        return None

    def _host_ok(self) -> bool:
        """On loopback, only a Host header naming loopback (DNS rebinding: see the module)."""
        if self.server.server_address[0] not in LOOPBACK:
            return True
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
        return host in LOOPBACK

    def _send(self, code: int, ctype: str, data: bytes, body: bool = True,
              cache: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", f"{ctype}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "max-age=3600" if cache else "no-store")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format, *args) -> None:
        """Quiet: a poll every 2 s from each open page would fill the terminal."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A page closed in the middle of an answer is not an error worth a traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


def make_server(storage, url: str, host: str = "127.0.0.1",
                port: int = 8080) -> ThreadingHTTPServer:
    """The server, bound (port 0: any free port; server.server_address says which)."""
    from plotly.offline import get_plotlyjs

    from mpiopt.reporting.dashboard_page import APP_JS, PAGE

    server = (_Server6 if ":" in host else _Server)((host, port), Handler)
    server.studies = Studies(storage, url)
    server.assets = {"/": ("text/html", PAGE.encode("utf-8")),
                     "/app.js": ("application/javascript", APP_JS.encode("utf-8")),
                     "/plotly.js": ("application/javascript", get_plotlyjs().encode("utf-8"))}
    return server
