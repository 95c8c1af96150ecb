"""MkDocs hook: the benchmarks' results files (benchmarks/results/*.md, written by the
benchmarks themselves) become pages of the site under results/, so the summary page links
to the detail and both are read in one place, while each file stays beside the script
that writes it. A link written `../benchmarks/results/NAME.md` (right when the Markdown is
read as files) is pointed at the page."""
from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, InclusionLevel

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def on_files(files, config):
    for path in sorted(RESULTS.glob("*.md")):
        files.append(File.generated(config, f"results/{path.name}", abs_src_path=str(path),
                                    inclusion=InclusionLevel.NOT_IN_NAV))
    return files


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri.count("/") == 0:           # a page at the top of docs/
        return markdown.replace("](../benchmarks/results/", "](results/")
    return markdown.replace("](../../benchmarks/results/", "](../results/")
