"""The README and the docs site (docs/, mkdocs.yml) stay short, complete and in step with the code.

Cheap text checks only; `mkdocs build --strict` (in .ci/run) checks links,
anchors and the generated reference pages.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nsq.cli import SUBCOMMANDS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"

README_MAX_LINES = 300


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move the detail to a page under docs/")


def test_every_subcommand_is_in_the_readme_command_table() -> None:
    rows = re.findall(r"^\| `nsq ([a-z0-9-]+)` \|", README.read_text(encoding="utf-8"), re.M)
    missing = sorted(set(SUBCOMMANDS) - set(rows))
    assert not missing, f"README.md's command table has no row for: {', '.join('nsq ' + m for m in missing)}"


def test_readme_links_into_docs_exist() -> None:
    links = re.findall(r"\]\(((?:docs/|LICENSE)[^)#\s]*)", README.read_text(encoding="utf-8"))
    assert links
    broken = [link for link in links if not (ROOT / link).exists()]
    assert not broken, f"README.md links to missing files: {broken}"


def test_readme_keeps_the_quickstart_section_the_docs_include() -> None:
    text = README.read_text(encoding="utf-8")
    assert "--8<-- [start:quickstart]" in text and "--8<-- [end:quickstart]" in text
    assert '--8<-- "README.md:quickstart"' in (DOCS / "quickstart.md").read_text(encoding="utf-8")


def _nav_pages() -> set[str]:
    text = MKDOCS.read_text(encoding="utf-8")
    nav = text[text.index("\nnav:"):]
    return set(re.findall(r"^\s+- (?:[^:\n]+: )?([\w./-]+\.md)\s*$", nav, re.M))


def test_every_docs_page_is_in_the_nav() -> None:
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    nav = _nav_pages()
    assert not sorted(pages - nav), f"pages under docs/ missing from mkdocs.yml's nav: {sorted(pages - nav)}"
    assert not sorted(nav - pages), f"mkdocs.yml's nav names missing pages: {sorted(nav - pages)}"


def test_every_http_route_is_in_the_http_reference() -> None:
    doc = (DOCS / "reference" / "http.md").read_text(encoding="utf-8")
    missing = []
    for module in ("nsq/server/nsqd/http/api.py", "nsq/server/lookupd/http.py"):
        source = (ROOT / module).read_text(encoding="utf-8")
        routes = re.findall(r"\.add_(?:get|post|put|delete|patch|route)\(\s*\"([^\"]+)\"", source)
        assert routes, module
        missing += [f"{module}: {path}" for path in routes if f"`{path}`" not in doc and f" {path}`" not in doc]
    assert not missing, f"docs/reference/http.md does not list: {missing}"


def test_every_prometheus_metric_is_in_the_metrics_reference() -> None:
    doc = (DOCS / "reference" / "metrics.md").read_text(encoding="utf-8")
    missing = []
    for module in ("nsq/server/nsqd/stats/metrics.py", "nsq/server/lookupd/metrics.py"):
        source = (ROOT / module).read_text(encoding="utf-8")
        names = set(re.findall(r"\"((?:nsq|nsqlookupd)_[a-z0-9_]+)\"", source))
        assert names, module
        missing += [f"{module}: {name}" for name in sorted(names)
                    if not re.search(rf"`{name}(_total)?`", doc)]
    assert not missing, f"docs/reference/metrics.md does not list: {missing}"


MODULE_MAX_LINES = 600


def test_modules_over_600_lines_are_the_listed_exceptions() -> None:
    """docs/architecture.md: modules stay under 600 lines, or are listed
    with a reason in its "Exceptions to the 600-line rule" section."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Exceptions to the 600-line rule", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^- `(nsq/[^`]+\.py)`", section, re.M))
    long = {str(p.relative_to(ROOT)) for p in (ROOT / "nsq").rglob("*.py")
            if len(p.read_text(encoding="utf-8").splitlines()) > MODULE_MAX_LINES}
    assert not long - listed, f"over {MODULE_MAX_LINES} lines and not in docs/architecture.md's exceptions: {sorted(long - listed)}"
    assert not listed - long, f"listed as exceptions but not over {MODULE_MAX_LINES} lines: {sorted(listed - long)}"


def test_nsqd_import_cycles_stay_small():
    """The largest import cycle inside nsq/server/nsqd, TYPE_CHECKING imports
    included, is at most six modules (docs/architecture.md, "Inside nsqd")."""
    import importlib.machinery
    import importlib.util

    pytest.importorskip("grimp")
    path = Path(__file__).resolve().parent.parent / "scripts" / "import-cycles"
    loader = importlib.machinery.SourceFileLoader("import_cycles", str(path))
    spec = importlib.util.spec_from_loader("import_cycles", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    count, cycle = module.largest_cycle("nsq.server.nsqd")
    assert count > 30 and len(cycle) <= 6, cycle
