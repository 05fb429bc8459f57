"""mkdocs hooks: the repository's benchmark record in the site, the method pages in the navigation,
and the results pages out of the search.

* ``BENCHMARKS.md`` (written by ``make bench``) becomes the page ``results/benchmarks.md`` and
  ``benchmarks/figures/*.png`` become ``results/benchmarks/figures/``, where the record's own links
  (``benchmarks/figures/...``) point from that page; the results pages link the figures the same way.
* Every credit method's page (``credit/methods/NAME.md``, ``credit/methods/token/NAME.md``, written
  by ``docs/gen_reference.py`` from the registry) is listed under the "Credit methods" entry of the
  navigation, so a newly registered method needs no edit of ``mkdocs.yml``.
* Pages under ``results/`` (tables of measurements, the full benchmark record) are left out of the
  search index (Material's ``search: exclude`` page setting), so a search finds the guides first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
METHODS = "credit/methods.md"  # the nav entry the method pages follow
METHOD_DIRS = (("Message-level methods", "credit/methods"), ("Token-level methods", "credit/methods/token"))
UNSEARCHED = "results/"


def method_sections(docs: Path = DOCS) -> list[dict[str, list[dict[str, str]]]]:
    """The navigation sections of the method pages on disk, each sorted by name."""
    out = []
    for title, folder in METHOD_DIRS:
        pages = sorted((docs / folder).glob("*.md"))
        if pages:
            out.append({title: [{p.stem: f"{folder}/{p.name}"} for p in pages]})
    return out


def with_method_pages(nav: list[Any], sections: list[dict[str, Any]]) -> bool:
    """Insert ``sections`` after the nav entry of ``credit/methods.md`` (searched at any depth);
    False when there is no such entry."""
    for k, item in enumerate(nav):
        if isinstance(item, dict):
            value = next(iter(item.values()))
            if value == METHODS:
                nav[k + 1:k + 1] = sections
                return True
            if isinstance(value, list) and with_method_pages(value, sections):
                return True
    return False


def on_config(config):
    if not with_method_pages(config["nav"], method_sections()):
        raise ValueError(f"mkdocs.yml: the nav has no entry for {METHODS}, after which the method pages go")
    return config


def on_files(files, config):
    files.append(File.generated(config, "results/benchmarks.md", abs_src_path=str(ROOT / "BENCHMARKS.md")))
    for figure in sorted((ROOT / "benchmarks" / "figures").glob("*.png")):
        files.append(File.generated(config, f"results/benchmarks/figures/{figure.name}", abs_src_path=str(figure)))
    return files


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri.startswith(UNSEARCHED):
        page.meta["search"] = {**(page.meta.get("search") or {}), "exclude": True}
    return markdown
