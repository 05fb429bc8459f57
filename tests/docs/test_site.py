"""The site reads well: navigation tabs, wide tables that scroll instead of breaking field names,
docstring sections as lists (a record's ``Fields:`` too), results pages out of the search; and the
strict build of the whole site holds all of it (the one slow test here builds it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.docs.docs_modules import load_docs_module

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


load = load_docs_module


@pytest.fixture(scope="module")
def mkdocs_yml() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def test_tabs_css_and_list_sections_are_configured(mkdocs_yml):
    assert "navigation.tabs" in mkdocs_yml["theme"]["features"]
    for sheet in mkdocs_yml["extra_css"]:
        css = (DOCS / sheet).read_text(encoding="utf-8")
        assert "overflow-x: auto" in css and "white-space: nowrap" in css
    handler = next(p["mkdocstrings"] for p in mkdocs_yml["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    options = handler["handlers"]["python"]["options"]
    assert options["docstring_section_style"] == "list"
    assert options["extensions"] == ["docs/griffe_fields.py"]


def test_a_records_fields_become_list_items():
    from dataclasses import fields

    from teamplay.records import Message

    text = load("griffe_fields").fields_as_list(Message.__doc__)
    for field in fields(Message):
        assert f"- `{field.name}`: " in text, field.name
    continued = text.split("- `entropies`: ")[1].splitlines()[1]
    assert continued.strip().startswith("shape [C]") and not continued.lstrip().startswith("- ")


def test_results_pages_are_left_out_of_the_search():
    hooks = load("hooks")
    for uri, excluded in (("results/arena.md", True), ("results/benchmarks.md", True),
                          ("tutorials/first-run.md", False), ("credit/methods/grpo.md", False)):
        page = SimpleNamespace(file=SimpleNamespace(src_uri=uri), meta={})
        hooks.on_page_markdown("text", page=page, config={}, files=[])
        assert bool(page.meta.get("search", {}).get("exclude")) is excluded, uri


@pytest.mark.slow  # builds the whole site (mkdocs --strict, about 10 s on an idle 2-core machine)
def test_the_strict_build_holds_it(tmp_path):
    site = tmp_path / "site"
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
                            cwd=ROOT, capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1",
                                                                         "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-3000:]
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    searched = {doc["location"].split("#")[0] for doc in index["docs"]}
    assert "tutorials/first-run/" in searched and "credit/methods/grpo/" in searched
    assert not [loc for loc in searched if loc.startswith("results/")]
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "<summary>Fields</summary>\n  <ul>\n<li><code>agent</code>:" in api
    assert 'class="md-tabs' in (site / "index.html").read_text(encoding="utf-8")


def test_every_tutorial_says_how_long_it_takes_and_what_it_can_and_cannot_show():
    tutorials = sorted((DOCS / "tutorials").glob("*.md"))
    assert len(tutorials) >= 4
    for page in tutorials:
        text = page.read_text(encoding="utf-8")
        head = " ".join(text[:text.find("\n## ")].split())  # said before the first step, lines joined
        for promise in ("**Time:**", "**What it can show:**", "**What it cannot show:**"):
            assert promise in head, f"{page.name}: no {promise} before its first section"
        assert "2-core CPU" in head, f"{page.name}: its time is not given for a 2-core CPU"
