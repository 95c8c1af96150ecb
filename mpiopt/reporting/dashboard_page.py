"""The dashboard's page: HTML with no data in it, and the script that fills it.

The script polls the JSON endpoints (dashboard.py) every poll_s and redraws in place:
the studies, the chosen study's figures (Plotly.react, only when their version changed),
its trials table (sortable by a click on a column, filtered by text and status) and one
trial's detail (its curve, folds, metrics, error). Everything from the database goes in
with textContent or as plotly data (strings HTML-escaped by the server), never innerHTML.
The study and trial shown are kept in the address's #fragment, so a reload or a shared
link opens the same view.

The trials table fits a window of 1280 px for a study of the examples' size (a dozen
parameters and metrics): headers break after `_` and `.` (never inside a word), numbers
show 4 significant digits (the detail shows them all) and an error its first line, cut
with an ellipsis (the whole error is in the detail, and in the cell's tooltip). A table
wider than that scrolls sideways inside its box with the trial number kept in view, and
says so. The figures are rebuilt at most every few seconds (a forest is fitted for some);
while they show fewer finished trials than the table, a line above them says so.
"""

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#222}
header{display:flex;gap:1em;align-items:baseline;padding:.6em 1em;background:#f4f4f4;border-bottom:1px solid #ddd}
header h1{font-size:1.2em;margin:0} #status{color:#555;font-size:.9em} #status.down{color:#b00}
main{max-width:1600px;margin:0 auto;padding:0 1em 3em}
h2{font-size:1.1em;margin-top:1.4em} .meta{color:#555} .note{color:#8a5a00;background:#fff6e0;padding:.5em .8em;border-radius:4px}
table{border-collapse:collapse;width:100%;font-size:.9em}
td,th{border-bottom:1px solid #ddd;padding:.25em .3em;text-align:left;vertical-align:top}
#trial-table td{white-space:nowrap} #trial-table td.error div{max-width:10em;overflow:hidden;text-overflow:ellipsis}
#trial-table th{overflow-wrap:normal;word-break:normal}
#trial-table td:first-child,#trial-table th:first-child{position:sticky;left:0;background:#fff}
#trial-table tr.chosen td:first-child{background:#e4efff} .caption{font-size:.9em}
th.sort{cursor:pointer;user-select:none} th.sort:hover{background:#eee}
tbody tr{cursor:pointer} tbody tr:hover{background:#f0f6ff} tr.chosen{background:#e4efff}
.COMPLETE{color:#1f77b4} .PRUNED{color:#c55f00} .FAILED{color:#d62728} .RUNNING{color:#2ca02c}
.INTERRUPTED{color:#9467bd} .PENDING{color:#7f7f7f}
.controls{display:flex;gap:.6em;margin:.5em 0} .controls input{flex:1;padding:.3em}
pre{white-space:pre-wrap;background:#fafafa;border:1px solid #eee;padding:.5em;font-size:.85em}
#detail{border:1px solid #ccd;border-radius:6px;padding:0 1em 1em;margin-top:1em}
.scroll{max-height:60vh;overflow:auto} .scroll th{position:sticky;top:0;background:#fff}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2em 1em} dt{color:#555}
"""

PAGE = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mpiopt dashboard</title>
<style>{STYLE}</style>
<script src="/plotly.js"></script>
<script src="/app.js" defer></script>
</head><body>
<header><h1>mpiopt dashboard</h1><span id="status">loading...</span></header>
<main>
<h2>Studies</h2>
<p class="note" id="waiting" hidden></p>
<table id="studies"><thead><tr><th>study</th><th>state</th><th>metric</th><th>trials</th>
<th>complete</th><th>running</th><th>pruned</th><th>failed</th><th>best</th></tr></thead>
<tbody></tbody></table>
<section id="study" hidden>
<h2 id="study-name"></h2>
<p class="meta" id="study-meta"></p>
<ul class="meta" id="study-jobs"></ul>
<p id="study-best"></p>
<section id="trials"><h2>Trials</h2>
<div class="controls"><input id="filter" type="search" placeholder="filter: any text in a row">
<select id="status-filter"><option value="">every status</option></select></div>
<div class="scroll"><table id="trial-table"><thead></thead><tbody></tbody></table></div>
<p class="meta" id="trial-count"></p></section>
<section id="detail" hidden></section>
<p class="note" id="lag" hidden></p>
<div id="figures"></div>
</section>
</main>
</body></html>
"""

APP_JS = r"""
"use strict";
const STATUSES = ["COMPLETE", "PRUNED", "FAILED", "RUNNING", "INTERRUPTED", "PENDING"];
const state = {study: null, version: null, rowsVersion: null, rows: [], params: [], metrics: [], hover: {}, sort: "number",
               desc: false, trial: null, polls: 0, pollMs: 2000, metric: "value", drawn: null, counts: {}};

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props || {});
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(child == null ? "-" : String(child)));
  }
  return node;
}
function fmt(v, digits) {
  if (v === null || v === undefined) return "-";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(+v.toPrecision(digits || 6));
  return String(v);
}
function breakable(label) {     // a header that may break after _ and ., never inside a word
  const parts = [];
  for (const piece of String(label).split(/(?<=[_.])/)) {
    if (parts.length) parts.push(el("wbr"));
    parts.push(piece);
  }
  return parts;
}
function seconds(s) {
  if (s === null || s === undefined) return "-";
  if (s < 10) return s.toFixed(2) + "s";
  const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60), r = Math.round(s % 60);
  return (h ? h + "h" : "") + (m ? m + "m" : "") + (r || !(h || m) ? r + "s" : "");
}
function esc(text) {     // a string from the database put into a plotly label
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;").replace(/'/g, "&#x27;");
}
async function getJSON(url) {
  const answer = await fetch(url, {cache: "no-store"});
  const data = await answer.json();
  if (!answer.ok) throw new Error(data.error || answer.statusText);
  return data;
}
function readHash() {
  const found = new URLSearchParams(location.hash.slice(1));
  state.study = found.get("study");
  const n = found.get("trial");
  state.trial = n === null || n === "" ? null : Number(n);
}
function writeHash() {
  const parts = new URLSearchParams();
  if (state.study !== null) parts.set("study", state.study);
  if (state.trial !== null) parts.set("trial", String(state.trial));
  history.replaceState(null, "", "#" + parts.toString());
}

function drawStudies(studies, waiting) {
  const note = document.getElementById("waiting");
  note.hidden = !waiting;
  note.textContent = waiting || "";
  const body = document.querySelector("#studies tbody");
  body.replaceChildren(...studies.map(s => {
    const row = el("tr", {}, el("td", {}, s.name), el("td", {}, s.state),
      el("td", {}, s.metric + " (" + s.direction + ")"), el("td", {}, s.trials),
      el("td", {}, s.complete), el("td", {}, s.running), el("td", {}, s.pruned),
      el("td", {}, s.failed), el("td", {}, fmt(s.best)));
    row.dataset.study = s.name;
    if (s.name === state.study) row.className = "chosen";
    row.addEventListener("click", () => choose(s.name));
    return row;
  }));
  if (state.study === null && studies.length) choose(studies[0].name);
}
function choose(name) {
  if (name !== state.study) {
    state.study = name; state.version = null; state.rowsVersion = null; state.trial = null;
    state.rows = [];
    document.getElementById("figures").replaceChildren();
    document.getElementById("detail").hidden = true;
  }
  writeHash();
  refresh().catch(() => {});      // (the next poll says what went wrong)
}

function drawStudy(d) {
  document.getElementById("study").hidden = false;
  document.getElementById("study-name").textContent = "Study " + d.name;
  state.metric = d.metric;
  const counts = STATUSES.filter(s => d.counts[s.toLowerCase()])
    .map(s => d.counts[s.toLowerCase()] + " " + s.toLowerCase()).join(", ");
  document.getElementById("study-meta").textContent = d.metric + " (" + d.direction + ") \u00b7 " +
    d.state + " \u00b7 " + d.trials + " trials" + (counts ? ": " + counts : "");
  document.getElementById("study-jobs").replaceChildren(...(d.jobs || []).map(j => el("li", {},
    ["job " + j.id, j.host, j.launcher, j.groups === null ? null : j.groups + " groups",
     j.running ? j.running + " running" : null,
     j.state + (j.taken_by === null ? "" : ", taken over by job " + j.taken_by)]
    .filter(x => x !== null && x !== "").join(" \u00b7 "))));
  const best = document.getElementById("study-best");
  best.textContent = d.best && d.best.front ? d.best.title + ": trial(s) " + d.best.front.join(", ")
    : d.best ? "Best " + d.metric + " " + fmt(d.best.value) + " (trial " +
    d.best.number + "): " + Object.entries(d.best.params).map(([k, v]) => k + "=" + fmt(v)).join(", ")
    : "No complete trial yet.";
  state.params = d.params; state.metrics = d.metrics;
  if (d.rows) { state.rows = d.rows; state.rowsVersion = d.rows_version; drawTrials(); }
  state.counts = d.counts;
  if (d.figures) { state.hover = d.hover; state.drawn = d.drawn; drawFigures(d.figures); state.version = d.version; }
  drawLag();
}
function drawLag() {      // figures older than the table: say so, and by how much
  const lag = document.getElementById("lag");
  const behind = state.drawn === null ? [] : ["complete", "pruned", "failed"]
    .filter(s => (state.drawn[s] || 0) !== (state.counts[s] || 0));
  lag.hidden = !behind.length;
  lag.textContent = behind.length ? "The figures are behind the table: they show " +
    behind.map(s => (state.drawn[s] || 0) + " " + s).join(", ") + " trial(s), the table " +
    behind.map(s => (state.counts[s] || 0) + " " + s).join(", ") +
    " (figures are redrawn every few seconds at most: a model is fitted for some)." : "";
}

function columns() {
  return [["number", "trial"], ["status", "status"], ["value", state.metric], ["duration", "duration"],
          ["group", "group"], ["epochs", "epochs"],
          ...state.params.map(p => ["param:" + p, p]),
          ...state.metrics.filter(m => m !== state.metric).map(m => ["metric:" + m, m]), ["error", "error"]];
}
function cell(row, key) {
  if (key.startsWith("param:")) return row.params[key.slice(6)];
  if (key.startsWith("metric:")) return row.metrics[key.slice(7)];
  return row[key];
}
function compare(a, b) {
  if (a === b) return 0;
  if (a === null || a === undefined) return 1;          // missing values last
  if (b === null || b === undefined) return -1;
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b));
}
function drawTrials() {
  const head = document.querySelector("#trial-table thead");
  head.replaceChildren(el("tr", {}, ...columns().map(([key, label]) => {
    const th = el("th", {className: "sort"}, ...breakable(label), state.sort === key ? (state.desc ? " \u25bc" : " \u25b2") : "");
    th.dataset.key = key;
    th.addEventListener("click", () => {
      state.desc = state.sort === key ? !state.desc : false; state.sort = key; drawTrials();
    });
    return th;
  })));
  const text = document.getElementById("filter").value.trim().toLowerCase();
  const status = document.getElementById("status-filter").value;
  let shown = state.rows.filter(r => (!status || r.status === status) &&
    (!text || columns().some(([key]) => fmt(cell(r, key)).toLowerCase().includes(text))));
  shown.sort((a, b) => {
    const order = compare(cell(a, state.sort), cell(b, state.sort));
    return (state.desc ? -order : order) || a.number - b.number;
  });
  const body = document.querySelector("#trial-table tbody");
  body.replaceChildren(...shown.map(r => {
    const row = el("tr", {className: r.status + (r.number === state.trial ? " chosen" : "")},
      ...columns().map(([key]) => key === "error" ? el("td", {className: "error", title: r.error || ""}, el("div", {}, fmt(r.error)))
        : el("td", {}, key === "duration" ? seconds(r.duration) : fmt(cell(r, key), 4))));
    row.dataset.number = r.number;
    row.addEventListener("click", () => showTrial(r.number));
    return row;
  }));
  const box = document.querySelector("#trials .scroll");
  const wide = box.scrollWidth > box.clientWidth + 1;
  document.getElementById("trial-count").textContent = shown.length + " of " + state.rows.length +
    " trials shown" + (wide ? "; the table is wider than the window: scroll it sideways" : "");
}

function drawFigures(figures) {
  const box = document.getElementById("figures");
  for (const f of figures) {
    let section = document.getElementById("fig-" + f.kind);
    if (!section) {
      section = el("section", {id: "fig-" + f.kind}, el("h2", {}, f.title));
      box.append(section);
    }
    section.querySelector("h2").textContent = f.title;
    let caption = section.querySelector(".caption");
    if (f.caption && !caption) { caption = el("p", {className: "note caption"}); section.append(caption); }
    if (caption) { caption.hidden = !f.caption; caption.textContent = f.caption || ""; }
    if (f.note !== null) {
      const old = section.querySelector(".plot");
      if (old) { Plotly.purge(old); old.remove(); }
      let note = section.querySelector(".note:not(.caption)");
      if (!note) { note = el("p", {className: "note"}); section.insertBefore(note, caption || null); }
      note.textContent = f.note;
      continue;
    }
    const note = section.querySelector(".note:not(.caption)");
    if (note) note.remove();
    let plot = section.querySelector(".plot");
    const fresh = !plot;
    if (fresh) { plot = el("div", {className: "plot", id: "plot-" + f.kind}); section.insertBefore(plot, caption || null); }
    for (const trace of f.figure.data) {
      if (trace.meta === "trials") trace.text = trace.customdata.map(n => state.hover[n]);
    }
    Plotly.react(plot, f.figure.data, f.figure.layout, {displaylogo: false, responsive: true});
    if (fresh) plot.on("plotly_click", ev => {
      const point = ev.points && ev.points[0];
      if (point && point.data.meta === "trials") showTrial(point.customdata);
    });
  }
}

function showTrial(number) {
  state.trial = number;
  writeHash();
  drawTrials();
  refreshTrial();
}
async function refreshTrial() {
  if (state.trial === null || state.study === null) return;
  const box = document.getElementById("detail");
  let t;
  try {
    t = await getJSON("/api/trial?study=" + encodeURIComponent(state.study) + "&number=" + state.trial);
  } catch (e) {
    box.hidden = false; box.replaceChildren(el("p", {className: "note"}, e.message)); return;
  }
  const facts = [["status", t.status], [t.metric, fmt(t.value) + (t.value_std !== null ? " \u00b1 " + fmt(t.value_std) : "")],
    ["group", t.group], ["host", t.host], ["device", t.device], ["attempt", t.attempt],
    ["started", t.started_at], ["finished", t.finished_at], ["duration", seconds(t.duration)],
    ["seed", t.seed], ...(t.round !== null ? [["member", t.member], ["round", t.round], ["parent", t.parent]] : []),
    ...(t.resumed ? [["resumed", t.resumed]] : []),
    ...Object.entries(t.params).map(([k, v]) => ["param " + k, fmt(v)]),
    ...Object.entries(t.metrics).map(([k, v]) => ["metric " + k, fmt(v)]),
    ...(t.folds.length ? [["folds", t.folds.map(fmt).join(", ")]] : [])];
  const close = el("button", {type: "button"}, "close");
  close.addEventListener("click", () => { state.trial = null; box.hidden = true; writeHash(); drawTrials(); });
  const parts = [el("h2", {}, "Trial " + t.number + " ", close),
                 el("dl", {}, ...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]))];
  if (t.error) parts.push(el("h3", {}, t.status === "PRUNED" ? "Pruned" : "Error"),
                         el("pre", {id: "trial-error"}, t.error));
  const curve = el("div", {id: "trial-curve"});
  parts.push(t.curve.length ? curve : el("p", {className: "meta"}, "no per-epoch values reported"));
  box.hidden = false;
  box.replaceChildren(...parts);
  if (t.curve.length) {      // [fold, epoch, value]: a line per fold, its epochs from 1
    const folds = [...new Set(t.curve.map(p => p[0]))];
    const lines = folds.map(f => {
      const points = t.curve.filter(p => p[0] === f);
      return {type: "scatter", mode: "lines+markers", name: "fold " + f,
              x: points.map(p => p[1]), y: points.map(p => p[2])};
    });
    Plotly.react(curve, lines,
      {height: 300, margin: {l: 60, r: 20, t: 20, b: 45}, showlegend: folds.length > 1,
       xaxis: {title: {text: folds.length > 1 ? "epoch (of each fold)" : "epoch"}},
       yaxis: {title: {text: esc(t.metric)}}}, {displaylogo: false, responsive: true});
  }
}

async function refresh() {
  if (state.study === null) return;
  const d = await getJSON("/api/study?name=" + encodeURIComponent(state.study) +
                          "&have=" + encodeURIComponent(state.version || "") +
                          "&rows=" + encodeURIComponent(state.rowsVersion || ""));
  drawStudy(d);
}
async function poll() {
  const status = document.getElementById("status");
  try {
    const s = await getJSON("/api/studies");
    state.pollMs = 1000 * (s.poll_s || 2);
    drawStudies(s.studies, s.waiting);
    await refresh();
    await refreshTrial();
    state.polls += 1;
    document.body.dataset.polls = state.polls;
    status.className = "";
    status.textContent = "live: updated " + new Date().toLocaleTimeString() + " (every " + state.pollMs / 1000 + " s)";
  } catch (e) {
    status.className = "down";
    status.textContent = "not updated: " + e.message;
  } finally {
    setTimeout(poll, state.pollMs);
  }
}

for (const s of STATUSES) document.getElementById("status-filter").append(el("option", {value: s}, s.toLowerCase()));
document.getElementById("filter").addEventListener("input", drawTrials);
document.getElementById("status-filter").addEventListener("change", drawTrials);
window.addEventListener("hashchange", () => {   // a link, or the address edited by hand
  const before = state.study;
  readHash();
  const wanted = state.study, trial = state.trial;
  state.study = before;
  if (wanted !== null) choose(wanted);
  state.trial = trial;
  writeHash();
  refreshTrial().catch(() => {});
});
readHash();
poll();
"""
