"""No package or benchmark file cites a document that is not in the repository.

A citation is any ``*.md`` path in a ``.py`` file of ``teamplay/`` or ``benchmarks/``, with an
optional ``#anchor``. It must name a file of the repository (relative to its root), and an anchor
into a page of ``docs/`` must be one of that page's headings (an explicit ``{#id}`` or the heading's
slug). ``README.md`` and ``BENCHMARKS.md`` anchors are prose (``BENCHMARKS.md §2b``) and are not
checked. Two names are outputs the package writes, not citations: a sweep's ``results.md`` and an
export's ``DIR/README.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"(?<![\w./-])([\w./-]+\.md)(#[\w-]+)?")
#: written by the package (a sweep's table, an export's model card), never read from the repository
WRITTEN = {"results.md", "DIR/README.md"}


def citations() -> list[tuple[str, int, str, str]]:
    """(file, line, path, anchor) of every ``.md`` path in the package's and benchmarks' sources."""
    found = []
    for top in ("teamplay", "benchmarks"):
        for source in sorted((ROOT / top).rglob("*.py")):
            for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), start=1):
                for m in CITATION.finditer(line):
                    found.append((str(source.relative_to(ROOT)), number, m.group(1), m.group(2) or ""))
    return found


def resolve(path: str, source: str) -> Path | None:
    """The cited file: relative to the repository root, or a bare name beside its ``ROOT / ...`` join."""
    if (ROOT / path).is_file():
        return ROOT / path
    line_joined = {"credit-paid.md": ROOT / "docs" / "results" / "credit-paid.md"}  # DOCS_PAGE = ROOT / ... / name
    return line_joined.get(path) if source == "benchmarks/credit_paid.py" else None


def anchors(page: Path) -> set[str]:
    """The ids a Markdown page's headings get: explicit ``{#id}``, else the slug of the heading."""
    ids = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            continue
        explicit = re.search(r"\{#([\w-]+)\}\s*$", line)
        if explicit:
            ids.add(explicit.group(1))
        else:
            title = line.lstrip("#").strip().lower()
            ids.add(re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", title)).strip("-"))
    return ids


def test_the_scan_finds_citations_and_recognises_a_missing_one():
    # the scan must see the package's real citations, or the test below would pass on nothing
    paths = {path for _, _, path, _ in citations()}
    assert {"docs/credit/specification.md", "BENCHMARKS.md", "docs/how-to/evaluate.md"} <= paths
    assert resolve("credit_spec.md", "teamplay/x.py") is None
    assert [m.group(1) for m in CITATION.finditer("see notes/design.md#top and README.md")] == [
        "notes/design.md", "README.md"]


def test_every_cited_document_is_in_the_repository():
    missing = [f"{source}:{number}: {path}" for source, number, path, _ in citations()
               if path not in WRITTEN and resolve(path, source) is None]
    assert not missing, "cited documents that are not in the repository:\n" + "\n".join(missing)


def test_anchors_into_the_docs_exist():
    cited = [(source, number, path, anchor[1:]) for source, number, path, anchor in citations()
             if path.startswith("docs/") and anchor]
    assert any(path == "docs/credit/specification.md" for _, _, path, _ in cited)
    wrong = [f"{source}:{number}: {path}#{anchor}" for source, number, path, anchor in cited
             if anchor not in anchors(ROOT / path)]
    assert not wrong, "anchors that are not headings of their page:\n" + "\n".join(wrong)
