"""The documentation site builds strictly and reads in a browser.

`mkdocs build --strict` fails on a broken link, a missing anchor or a page left out of the
nav; on the built HTML every internal link must reach a file and an anchor that exist;
and headless Chromium (Debian's, as in tests/test_report.py: a missing browser fails)
loads the home page and the spec reference with their content and no script errors.
"""
from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from conftest import ROOT, subprocess_env
from test_report import browse, console_errors


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = subprocess_env() | {"NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-3000:]}"
    return out


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        for key in ("href", "src"):
            if tag in ("a", "img") and attrs.get(key):
                self.links.append(attrs[key])


def _parsed(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def test_every_internal_link_of_the_built_site_resolves(site):
    # (404.html links from the server's root, the one page a reader never opens as a file)
    pages = {p: _parsed(p) for p in site.rglob("*.html") if p.name != "404.html"}
    assert len(pages) > 20
    broken = []
    for page, parsed in pages.items():
        for link in parsed.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith(("//", "mailto:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {link}")
            elif parts.fragment and target.suffix == ".html" and \
                    parts.fragment not in pages.get(target, _Links()).ids:
                broken.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "broken internal links:\n" + "\n".join(broken[:20])


def test_the_site_has_every_page_the_reader_needs(site):
    for page in ("index.html", "getting-started.html", "how-to/cluster.html",
                 "how-to/resume.html", "how-to/see-a-study.html", "reference/spec.html",
                 "reference/cli.html", "reference/api.html", "reference/failures.html",
                 "reference/environment.html", "benchmarks.html", "changelog.html",
                 "results/scheduling.html"):
        assert (site / page).exists(), page
    api = (site / "reference/api.html").read_text(encoding="utf-8")
    assert "trials_dataframe" in api and "best_model" in api, "the API page lacks its docstrings"


@pytest.mark.parametrize("page,expect", [
    ("index.html", ["mpiopt", "Getting started", "coordinator"]),
    ("reference/spec.html", ["group_size", "retry_timeout", "keep_models"]),
])
def test_pages_load_in_a_headless_browser(site, page, expect):
    proc = browse(site / page, "--enable-logging=stderr", "--v=0", "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert 'class="md-content"' in dom, f"{page}: the Material layout did not render"
    for text in expect:
        assert text in dom, f"{page}: {text!r} missing from the rendered page"
    assert not console_errors(proc.stderr), f"{page}: {console_errors(proc.stderr)}"
    assert re.search(r"<nav[^>]*md-nav", dom), f"{page}: no navigation"


# In a table cell, the words that the browser split across two lines (a word broken at a
# hyphen, a slash or anywhere to fit its column: the spec's "descriptio" over "n")
SPLIT_WORDS = r"""(() => {
  const out = [];
  for (const cell of document.querySelectorAll('.md-typeset td, .md-typeset th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node; (node = walker.nextNode());) {
      for (const m of node.textContent.matchAll(/\S+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].filter(r => r.width > 0)
                                                         .map(r => Math.round(r.top)));
        if (lines.size > 1) out.push(m[0]);
      }
    }
  }
  return out; })()"""


def test_table_cells_never_break_a_word(site, tmp_path, width=1280):
    """Every table of the site, in a window of 1280 px: a line breaks between words
    only, never inside a name (`retry_timeout`, `--resume-or-start`, `hartmann6-noisy`);
    a table too wide scrolls in its box."""
    from test_dashboard import Browser

    pages = [p for p in sorted(site.rglob("*.html"))
             if p.name != "404.html" and "<table>" in p.read_text(encoding="utf-8")]
    assert len(pages) > 10
    browser = Browser(tmp_path, width=width)
    try:
        split = {}
        for page in pages:
            browser.open(page.as_uri())
            browser.wait_for("document.readyState == 'complete' && "
                             "document.querySelector('.md-typeset td')", f"{page.name}'s tables")
            words = browser.js(SPLIT_WORDS)
            if words:
                split[str(page.relative_to(site))] = words[:6]
        assert not split, f"words split across lines in table cells: {split}"
    finally:
        browser.close()
