"""MkDocs hook: the benchmarks' results files (benchmarks/results/*.md, written by the
benchmarks themselves) become pages of the site under results/, so the summary page links
to the detail and both are read in one place, while each file stays beside the script
that writes it. A link written `../benchmarks/results/NAME.md` (right when the Markdown is
read as files) is pointed at the page."""
from __future__ import annotations

import re
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


_TABLE = re.compile(r"<table>.*?</table>", re.S)
_TEXT = re.compile(r'(?<!"nobr")>([^<]+)<')      # (text not already kept whole)
_CODE_TEXT = re.compile(r"<code>([^<]*)</code>")
# where a browser may break a line inside a word: after a hyphen, a slash, a dash
_BREAKS = re.compile(r"[-/\u2010-\u2014]")


def on_page_content(html, page, config, files):
    """In a table, a line breaks between words only: each word that holds a place where a
    browser would break it (a hyphen, a slash: `--resume-or-start`, `hartmann6-noisy`,
    `2026-11-24`) and every word of a code span is kept whole in a span of its own
    (docs/stylesheets/extra.css stops the breaks inside the others). A table too wide
    for the page then scrolls sideways in its box."""
    return _TABLE.sub(lambda table: _whole_words(table.group(0)), html)


def _whole_words(table: str) -> str:
    def keep(text: str, every: bool) -> str:
        return " ".join(f'<span class="nobr">{w}</span>' if w and (every or _BREAKS.search(w))
                        else w for w in text.split(" "))

    table = _CODE_TEXT.sub(lambda m: "<code>" + keep(m.group(1), True) + "</code>", table)
    return _TEXT.sub(lambda m: ">" + keep(m.group(1), False) + "<", table)
