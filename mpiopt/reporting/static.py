"""`mpiopt plot`: one Panel as a PNG or SVG with matplotlib, for a node without a browser.

Drawing only: figures.py decides what a plot shows, so these files agree with the HTML
report. matplotlib is imported on first use, with the Agg backend (no display needed).
A Panel with a note (nothing to draw) becomes a figure showing the note.
"""
from __future__ import annotations

from pathlib import Path

from mpiopt.reporting.view import STATUS_COLORS, Panel

FORMATS = (".png", ".svg")


def save(panel: Panel, path: Path) -> None:
    """Draw `panel` into `path` (its suffix picks the format)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5), dpi=100, layout="constrained")   # room for the title
    if panel.note is not None:
        fig.text(0.5, 0.5, panel.note, ha="center", va="center", wrap=True, fontsize=12)
    else:
        DRAW[panel.kind](fig, panel.data)
    fig.suptitle(panel.title, fontsize=11)
    fig.savefig(path, format=path.suffix[1:], bbox_inches="tight")


def history(fig, d: dict) -> None:
    ax = fig.subplots()
    for status, marker in (("COMPLETE", "o"), ("PRUNED", "x")):
        pts = [p for p in d["points"] if p["status"] == status]
        if pts:
            ax.scatter([p["number"] for p in pts], [p["value"] for p in pts], marker=marker,
                       color=STATUS_COLORS[status], label=status.lower(), zorder=3)
    if d["best"]:
        ax.step([b[0] for b in d["best"]], [b[1] for b in d["best"]], where="post",
                color="#333", label="best so far")
    ax.set(xlabel="trial", ylabel="value")
    ax.legend(loc="best", fontsize=8)


def parallel(fig, d: dict) -> None:
    """Each axis scaled to [0, 1] between its own min and max, labelled at both ends."""
    ax = fig.subplots()
    axes, metric = d["axes"], d["axes"][-1]["values"]
    lo_m, hi_m = min(metric), max(metric)
    cmap = _cmap("viridis")
    scaled = [_unit(a["values"]) for a in axes]
    for k in range(len(metric)):
        shade = 0.5 if hi_m == lo_m else (metric[k] - lo_m) / (hi_m - lo_m)
        ax.plot(range(len(axes)), [col[k] for col in scaled], color=cmap(shade), alpha=0.8)
    for i, a in enumerate(axes):
        ax.axvline(i, color="#999", lw=0.8)
        known = [v for v in a["values"] if v is not None]
        if known:
            ends = [min(known), max(known)]
            labels = [_tick(a, v) for v in ends]
            ax.text(i, -0.06, labels[0], ha="center", va="top", fontsize=7)
            ax.text(i, 1.04, labels[1], ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(axes)), [a["name"] for a in axes], fontsize=8)
    ax.set_yticks([])
    ax.set_ylim(-0.15, 1.12)


def importance(fig, d: dict) -> None:
    ax = fig.subplots()
    names = [s[0] for s in d["shares"]][::-1]
    shares = [s[1] for s in d["shares"]][::-1]
    ax.barh(names, shares, color=STATUS_COLORS["COMPLETE"])
    for y, s in enumerate(shares):
        ax.text(s, y, f" {s:.0%}", va="center", fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel(f"share of the variance (main effect); interactions {d['rest']:.0%}; "
                  f"{d['trials']} complete trials")


def slices(fig, d: dict) -> None:
    params = d["params"]
    cols = min(len(params), 3)
    rows = -(-len(params) // cols)
    fig.set_size_inches(4 * cols, 3.2 * rows)
    for k, p in enumerate(params):
        ax = fig.add_subplot(rows, cols, k + 1)
        x = [p["choices"].index(v) for v in p["x"]] if p["choices"] else p["x"]
        ax.scatter(x, p["y"], c=p["numbers"], cmap="Blues", edgecolors="#333", linewidths=0.5)
        if p["log"]:
            ax.set_xscale("log")
        if p["choices"]:
            ax.set_xticks(range(len(p["choices"])), p["choices"])
        ax.set_xlabel(p["name"])


def contour(fig, d: dict) -> None:
    ax = fig.subplots()
    x, y, pts = d["x"], d["y"], d["points"]
    filled = ax.contourf(x["grid"], y["grid"], d["z"], levels=15, cmap="viridis")
    fig.colorbar(filled, ax=ax)
    ax.scatter(pts["x"], pts["y"], c="white", edgecolors="black", s=25)
    for axis, set_scale, set_ticks, label in ((x, ax.set_xscale, ax.set_xticks, ax.set_xlabel),
                                              (y, ax.set_yscale, ax.set_yticks, ax.set_ylabel)):
        if axis["log"]:
            set_scale("log")
        if axis["ticks"]:
            set_ticks([t[0] for t in axis["ticks"]], [t[1] for t in axis["ticks"]])
        label(axis["name"])


def curves(fig, d: dict) -> None:
    ax = fig.subplots()
    for line in d["lines"]:
        color = STATUS_COLORS.get(line["status"], "#7f7f7f")
        ax.plot(line["epochs"], line["values"], color=color, lw=1,
                ls=":" if line["pruned"] else "-")
        if line["pruned"]:
            ax.plot(line["epochs"][-1], line["values"][-1], "x", color=color, ms=9)
    ax.set(xlabel="epoch (step)", ylabel="value")


def folds(fig, d: dict) -> None:
    ax = fig.subplots()
    for t in d["trials"]:
        ax.scatter([t["number"]] * len(t["folds"]), t["folds"], s=20, alpha=0.7,
                   color=STATUS_COLORS["COMPLETE"])
        if t["value"] is not None:
            ax.plot([t["number"] - 0.3, t["number"] + 0.3], [t["value"]] * 2, color="#333")
    ax.set(xlabel="trial", ylabel="value")


def timeline(fig, d: dict) -> None:
    ax = fig.subplots()
    groups = d["groups"]
    fig.set_size_inches(9, 1.5 + 0.5 * len(groups))
    for g, a, b in d["idle"]:
        ax.barh(groups.index(g), b - a, left=a, height=0.9, color=(0.8, 0, 0, 0.12))
    for bar in d["bars"]:
        ax.barh(groups.index(bar["group"]), bar["end"] - bar["start"], left=bar["start"],
                height=0.9, color=STATUS_COLORS.get(bar["status"], "#7f7f7f"), edgecolor="white")
    from matplotlib.patches import Patch

    shown = sorted({bar["status"] for bar in d["bars"]})
    ax.legend(handles=[Patch(color=STATUS_COLORS.get(s, "#7f7f7f"), label=s.lower()) for s in shown]
              + [Patch(color=(0.8, 0, 0, 0.12), label="idle")], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_yticks(range(len(groups)), [f"group {g}" for g in groups])
    ax.set_xlabel(f"seconds since {d['t0'][:19].replace('T', ' ')} UTC; efficiency "
                  f"{d['efficiency']:.1%} = {d['busy']:.1f} busy group-s / "
                  f"({len(groups)} groups × {d['wall']:.1f} s)")


def _unit(values: list) -> list:
    known = [v for v in values if v is not None]
    lo, hi = (min(known), max(known)) if known else (0.0, 1.0)
    return [0.5 if v is None or hi == lo else (v - lo) / (hi - lo) for v in values]


def _tick(axis: dict, v: float) -> str:
    if axis["ticks"]:
        return dict((t[0], t[1]) for t in axis["ticks"]).get(v, f"{v:g}")
    return f"{10 ** v:.3g}" if axis["log"] else f"{v:.4g}"


def _cmap(name: str):
    import matplotlib

    return matplotlib.colormaps[name]


def lineage(fig, d: dict) -> None:
    from matplotlib.ticker import MaxNLocator

    ax = fig.subplots()
    color = {m["member"]: f"C{i % 10}" for i, m in enumerate(d["members"])}
    for link in d["links"]:
        if link["exploit"]:
            ax.plot([link["x0"], link["x1"]], [link["y0"], link["y1"]], ls="--", color="#999", lw=0.8)
        else:
            ax.plot([link["x0"], link["x1"]], [link["y0"], link["y1"]], color=color[link["member"]], lw=1.2)
    for m in d["members"]:
        ax.scatter(m["rounds"], m["values"], s=20, color=color[m["member"]], label=f"member {m['member']}",
                   zorder=3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="round", ylabel="value")
    ax.legend(loc="best", fontsize=8)


DRAW = {"lineage": lineage, "history": history, "parallel": parallel, "importance": importance, "slice": slices,
        "contour": contour, "curves": curves, "folds": folds, "timeline": timeline}
