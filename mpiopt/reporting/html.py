"""`mpiopt report`: one self-contained HTML page that opens offline.

plotly.js is inlined (plotly.offline.get_plotlyjs(), about 4.6 MB): a cluster's login
node or a laptop on a train has no CDN. Everything else is small: each figure's JSON
once, and one table of trial hover texts that the figures share. Sections follow
figures.KINDS, then the failures table; a section with nothing to draw shows its note.
"""
from __future__ import annotations

import html
from datetime import datetime

from mpiopt import jsontext
from mpiopt.reporting.figures import KINDS, page_panels, panel
from mpiopt.reporting.timeline import held_text
from mpiopt.reporting.view import Panel, StudyView, trial_hovers
from mpiopt.trial import TrialStatus

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1100px;padding:0 1em;color:#222}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.6em}
.meta{color:#555} .note{color:#8a5a00;background:#fff6e0;padding:.5em .8em;border-radius:4px}
.figure{font-size:1.3em} table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #ddd;padding:.3em .5em;text-align:left;vertical-align:top}
pre{white-space:pre-wrap;margin:0;font-size:.85em}
"""

# Fills every trial trace's hover text from HOVER, then draws each figure.
SCRIPT = """
for (const [id, fig] of Object.entries(FIGURES)) {
  for (const trace of fig.data) {
    if (trace.meta === "trials") trace.text = trace.customdata.map(n => HOVER[n]);
  }
  Plotly.newPlot(id, fig.data, fig.layout, {displaylogo: false, responsive: true});
}
"""


def render(view: StudyView, kinds=KINDS) -> str:
    """The whole page as a string."""
    from plotly.offline import get_plotlyjs

    from mpiopt.reporting.plotly_figures import figure

    panels = page_panels(view, kinds)
    figures = {f"plot-{p.kind}": figure(p) for p in panels if p.note is None}
    body = [_header(view)] + [_section(p) for p in panels] + [_failures(panel("failures", view))]
    lineage = [p for p in panels if p.kind == "lineage"]
    if lineage:
        body.append(_lineage_table(lineage[0]))
    hovers = trial_hovers(view)
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>mpiopt report: {html.escape(view.name)}</title>",
        f"<style>{STYLE}</style>", f"<script>{get_plotlyjs()}</script>", "</head><body>",
        *body,
        f"<script>const HOVER = {_json(hovers)};\nconst FIGURES = {_json(figures)};\n{SCRIPT}</script>",
        "</body></html>", ""])


def _header(view: StudyView) -> str:
    counts = ", ".join(f"{view.count(s)} {s.value.lower()}" for s in TrialStatus if view.count(s))
    lines = [f"<h1>Study {html.escape(view.name)}</h1>",
             f'<p class="meta">{html.escape(_objectives(view))} · '
             f"{len(view.trials)} trials{': ' + counts if counts else ''} · "
             f"{len(view.params)} parameters · report made {_when(view.now)}</p>"]
    lines += _best_lines(view)
    timeline = panel("timeline", view)
    if timeline.note is None:
        d = timeline.data
        lines.append(f'<p class="figure">Efficiency <b id="efficiency">{d["efficiency"]:.1%}</b>'
                     f' <span class="meta">= {html.escape(held_text(d))}</span></p>')
    return "\n".join(lines)


def _objectives(view: StudyView) -> str:
    """"loss (minimize)", or every objective; the constraints after them."""
    front = view.front
    text = ", ".join(f"{n} ({d})" for n, d in zip(front.names, front.directions))
    return text + (f"; constraints {front.constraint_text()}" if front.constrained else "")


def _best_lines(view: StudyView) -> list[str]:
    """What "best" means for this study (mpiopt.reporting.front): the best trial, the
    best feasible one, or the Pareto front with its hypervolume and a row per trial."""
    front = view.front
    if front.multi:
        head = f'<p id="best">{html.escape(front.title())}</p>'
        if not front.trials:
            return [head]
        cells = "".join(f"<th>{html.escape(n)} ({d})</th>"
                        for n, d in zip(front.names, front.directions))
        rows = "".join(
            f"<tr><td>{t.number}</td>"
            + "".join(f"<td>{_num(v)}</td>" for v in front.values(t))
            + f"<td>{html.escape(_params(t.params))}</td></tr>" for t in front.trials)
        return [head, f'<table id="front"><tr><th>trial</th>{cells}<th>params</th></tr>'
                      f"{rows}</table>"]
    best = front.best
    if best is None:
        if front.constrained and front.complete:
            return [f'<p id="best">No complete trial meets the constraints '
                    f"({html.escape(front.constraint_text())}) yet</p>"]
        return []
    what = "feasible " if front.constrained else ""
    infeasible = sum(front.feasible(t) is False for t in front.complete)
    tail = (f" · {infeasible} complete trial(s) break a constraint "
            f"({html.escape(front.constraint_text())})" if infeasible else "")
    return [f'<p id="best">Best {what}{html.escape(view.metric)} <b>{best.value:.6g}</b> '
            f"(trial {best.number}): {html.escape(_params(best.params))}{tail}</p>"]


def _num(v) -> str:
    return "-" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)


def _section(p: Panel) -> str:
    head = f'<section id="{p.kind}"><h2>{html.escape(p.title)}</h2>'
    if p.note is not None:
        return f'{head}<p class="note">{html.escape(p.note)}</p></section>'
    caption = f'<p class="note caption">{html.escape(p.caption)}</p>' if p.caption else ""
    return f'{head}<div id="plot-{p.kind}" class="plot"></div>{caption}</section>'


def _failures(p: Panel) -> str:
    head = f'<section id="failures"><h2>{html.escape(p.title)}</h2>'
    if p.note is not None:
        return f'{head}<p class="note">{html.escape(p.note)}</p></section>'
    rows = "".join(
        f"<tr><td>{r['number']}</td><td>{_dash(r['group'])}</td><td>{html.escape(_dash(r['host']))}"
        f"</td><td>{r['attempt']}</td><td><details><summary>"
        f"{html.escape(_first_line(r['error']))}</summary><pre>{html.escape(r['error'])}</pre>"
        "</details></td></tr>" for r in p.data["rows"])
    return (f"{head}<table><tr><th>trial</th><th>group</th><th>host</th><th>attempt</th>"
            f"<th>error</th></tr>{rows}</table></section>")


def _lineage_table(p: Panel) -> str:
    """Every pbt round: its member, round, where it started and its value."""
    rows = "".join(
        f"<tr><td>{r['number']}</td><td>{r['member']}</td><td>{r['round']}</td>"
        f"<td>{_dash(r['parent'])}</td><td>{html.escape(r['how'])}</td>"
        f"<td>{'-' if r['value'] is None else format(r['value'], '.6g')}</td>"
        f"<td>{html.escape(r['status'].lower())}</td><td>{html.escape(_params(r['params']))}</td></tr>"
        for r in p.data["rows"])
    return ('<section id="lineage-table"><h2>Lineage (one row per round)</h2><table><tr>'
            "<th>trial</th><th>member</th><th>round</th><th>parent</th><th>how</th><th>value</th>"
            f"<th>status</th><th>params</th></tr>{rows}</table></section>")


def _params(params: dict) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in params.items())


def _json(value) -> str:
    """JSON safe inside <script>: no '</' can end the element early; an infinite value
    (a diverged epoch) becomes null, as JSON has no infinity."""
    return jsontext.dumps(value, separators=(",", ":"), default=float).replace("</", "<\\/")


def _first_line(text: str) -> str:
    """mpiopt's error texts start with the message and where (objective.describe_error)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0][:200] if lines else text


def _dash(v) -> str:
    return "-" if v is None else str(v)


def _when(now: datetime) -> str:
    return now.strftime("%Y-%m-%d %H:%M:%S UTC")
