"""The generated pages are what the code gives today, and the README is a short front door whose
links all resolve.

* ``docs/reference/configuration.md``, ``docs/credit/methods.md``, each method's page and the home
  page's figure caption equal what ``docs/gen_reference.py`` writes from the config models, the
  credit registry and the stored results (run it after changing any);
* every field of every config model is in the configuration reference, every method in the
  methods page (its own page: ``test_method_pages.py``);
* the README stays under 15 KB, and every relative link in it (figures and their sources included)
  names a file of the repository, and a section of BENCHMARKS.md that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.docs_modules import load_docs_module

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


@pytest.fixture(scope="module")
def gen():
    return load_docs_module("gen_reference")


def test_generated_pages_are_current(gen):
    pages = gen.all_pages()
    assert gen.orphans(pages) == [], "a method page names no registered method: run python docs/gen_reference.py"
    for path, make in pages.items():
        assert path.read_text(encoding="utf-8") == make(), (
            f"{path.relative_to(ROOT)} is out of date: run python docs/gen_reference.py")


def test_the_check_mode_finds_a_stale_page(gen, tmp_path, monkeypatch, capsys):
    stale = tmp_path / "configuration.md"
    stale.write_text("old\n")
    monkeypatch.setattr(gen, "PAGES", {stale: gen.config_page})
    monkeypatch.setattr(gen, "DOCS", tmp_path / "docs")
    (tmp_path / "docs").mkdir()
    assert gen.main(["--check"]) == 1


def test_every_config_field_and_method_is_documented(gen):
    from teamplay.config import FederatedConfig, TrainConfig
    from teamplay.credit import credit_methods
    from teamplay.credit.token import token_methods

    config = gen.config_page()
    models: list = []
    gen.walk(TrainConfig, models)
    gen.walk(FederatedConfig, models)
    for model in [TrainConfig, FederatedConfig, *models]:
        section = config[config.index(model.__name__):]
        for name in model.model_fields:
            assert f"| `{name}` |" in section, f"{model.__name__}.{name}"
    methods = gen.methods_page()
    built_in = {n: m for n, m in {**credit_methods(), **token_methods()}.items()
                if m.fn.__module__.startswith("teamplay.")}
    for name in built_in:
        assert re.search(rf"\| \[`{name}`\]\((methods/|methods/token/){name}\.md\) \|", methods), name


def github_slug(heading: str) -> str:
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def test_readme_is_short():
    assert len(README.read_bytes()) < 15_000


def test_readme_links_resolve():
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert len(links) > 20
    benchmarks = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    anchors = {github_slug(h) for h in re.findall(r"^#+ (.+)$", benchmarks, re.MULTILINE)}
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        path, _, anchor = link.partition("#")
        if path:
            assert (ROOT / path).exists(), link
        if anchor and path == "BENCHMARKS.md":
            assert anchor in anchors, link


def test_readme_keeps_the_two_commands():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## The two commands"):]
    assert "make demo" in section and re.search(r"make test .*minutes", section)
