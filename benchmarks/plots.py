"""The plots of the benchmarks summary (docs/benchmarks.md), drawn from the results files.

    python benchmarks/plots.py            # rewrite docs/images/*.svg from benchmarks/results/
    python benchmarks/plots.py --check    # exit 1 if an image is not what the results give

Every figure comes from a table in benchmarks/results/ (the file a benchmark writes), so a
plot can never show a figure the results do not hold: rerun a benchmark, then this.
The SVGs keep their text as text and carry no date, so the same tables give the same bytes.
"""
from __future__ import annotations

import argparse
import io
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
IMAGES = HERE.parent / "docs" / "images"


def tables(text: str) -> list[list[dict[str, str]]]:
    """Every Markdown table of `text` as rows of {column: cell}."""
    out, block = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            block.append([c.strip() for c in line.strip().strip("|").split("|")])
            continue
        if len(block) > 2:
            out.append([dict(zip(block[0], row)) for row in block[2:]])
        block = []
    return out


def efficiency_by_groups() -> dict[str, list[tuple[int, float]]]:
    """{algorithm: [(groups, efficiency %), ...]} of scheduling.py's first table (full
    waves of 0.5 s trials, groups of one rank)."""
    rows = tables((RESULTS / "scheduling.md").read_text())[0]
    out: dict[str, list] = {}
    for row in rows:
        if row["groups"].isdigit() and int(row["groups"]) <= 16:
            out.setdefault(row["algorithm"], []).append((int(row["groups"]),
                                                         float(row["efficiency %"])))
    return out


def mean_ranks() -> dict[int, dict[str, float]]:
    """{pending: {searcher: mean rank}} of quality_suite.py's table (the first run in the
    file: the suite's 18 problems)."""
    text = (RESULTS / "quality_suite.md").read_text().split("<!-- notes -->")[0]
    out: dict[int, dict[str, float]] = {}
    for part in re.split(r"^### (\d+) pending", text, flags=re.M)[1:]:
        if part.isdigit():
            pending = int(part)
            continue
        for table in tables(part):
            if table and "mean rank" in table[0]:
                out[pending] = {r["searcher"]: float(r["mean rank"]) for r in table}
    return out


def _figure(width: float = 6.4, height: float = 3.6):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "mpiopt", "font.size": 10})
    return plt, plt.subplots(figsize=(width, height))


def _svg(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    return buffer.getvalue()


def scheduling_svg() -> bytes:
    plt, (fig, ax) = _figure()
    for algorithm, points in efficiency_by_groups().items():
        groups, eff = zip(*points)
        ax.plot(groups, eff, marker="o", label=algorithm)
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8, 16], ["1", "2", "4", "8", "16"])
    ax.set_xlabel("groups (one rank each)")
    ax.set_ylabel("efficiency: ideal / wall time (%)")
    ax.set_ylim(80, 100.5)
    ax.set_title("Scheduling efficiency, 0.5 s trials (scheduling.py)")
    ax.grid(alpha=0.3)
    ax.legend()
    data = _svg(fig)
    plt.close(fig)
    return data


def quality_svg() -> bytes:
    ranks = mean_ranks()
    levels = sorted(ranks)
    # the searchers ranked at every level (skopt-gp runs a few problems at 1 pending only)
    searchers = sorted(set.intersection(*(set(ranks[p]) for p in levels)),
                       key=lambda s: ranks[levels[0]][s])
    plt, (fig, ax) = _figure(7.2, 3.8)
    width = 0.8 / len(levels)
    for i, pending in enumerate(levels):
        xs = [j + (i - (len(levels) - 1) / 2) * width for j in range(len(searchers))]
        ax.bar(xs, [ranks[pending][s] for s in searchers], width,
               label=f"{pending} pending")
    ax.set_xticks(range(len(searchers)), searchers, rotation=30, ha="right")
    ax.set_ylabel("mean rank over 18 problems (1 = best)")
    ax.set_title("Search quality (quality_suite.py, 20 seeds)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    data = _svg(fig)
    plt.close(fig)
    return data


PLOTS = {"scheduling-efficiency.svg": scheduling_svg, "quality-rank.svg": quality_svg}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if an image is stale")
    args = parser.parse_args(argv)
    stale = []
    for name, draw in PLOTS.items():
        path, data = IMAGES / name, draw()
        if args.check:
            if not path.exists() or path.read_bytes() != data:
                stale.append(name)
            continue
        IMAGES.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        print(f"wrote {path.relative_to(HERE.parent)}")
    if stale:
        print(f"stale: {', '.join(stale)}; run python benchmarks/plots.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
