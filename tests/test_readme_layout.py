"""The Layout (``docs/reference/layout.md``, linked from the README's Layout) is the tree: every
top-level module and package of ``teamplay`` is in it, every ``*.py`` it names exists, and the
packages it describes file by file (the step and run shell, Ray, Flower, serving) list every module
they hold (those in sub-packages too)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "teamplay"
#: packages whose Layout entry names each of their modules
LISTED_FILE_BY_FILE = ("training", "distributed", "federated", "serving")


LAYOUT = ROOT / "docs" / "reference" / "layout.md"


def layout_block() -> str:
    text = LAYOUT.read_text(encoding="utf-8")
    section = text[text.index("# Layout"):]
    return section[section.index("```") + 3:section.index("```", section.index("```") + 3)]


def entries(block: str) -> dict[str, str]:
    """Top-level entry name -> its text (an entry starts at 2 spaces of indent, continues deeper)."""
    out: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        m = re.match(r"^  (\S+?)/?\s", line + " ")
        if m and not line.startswith("   "):
            current = m.group(1).removesuffix(".py")
            out[current] = line
        elif current is not None:
            out[current] += "\n" + line
    return out


def test_every_top_level_module_and_package_is_in_the_layout():
    block = layout_block()
    names = {p.stem for p in PACKAGE.glob("*.py") if p.stem not in {"__init__", "__main__"}}
    names |= {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    missing = sorted(n for n in names if not re.search(rf"\b{re.escape(n)}(\.py|/)", block))
    assert missing == []


def test_every_module_the_layout_names_exists():
    block = layout_block()
    named = set(re.findall(r"\b([a-z_0-9]+)\.py\b(?!:)", block))  # not "file.py:name"
    existing = {p.stem for p in PACKAGE.rglob("*.py")}
    assert sorted(named - existing) == []


def test_packages_described_file_by_file_list_every_module():
    by_entry = entries(layout_block())
    for package in LISTED_FILE_BY_FILE:
        text = by_entry[package]
        modules = sorted(p.stem for p in (PACKAGE / package).rglob("*.py") if p.stem != "__init__")
        assert [m for m in modules if f"{m}.py" not in text] == [], package


#: packages split into rooms (sub-packages) whose Layout entry names each room as ``room/``
ROOMS_NAMED = {"credit": "credit", "envs/tasks": "envs", "training": "training", "serving": "serving"}


def test_packages_in_rooms_name_every_room():
    by_entry = entries(layout_block())
    for package, entry in ROOMS_NAMED.items():
        rooms = sorted(p.name for p in (PACKAGE / package).iterdir() if (p / "__init__.py").exists())
        assert rooms, package  # the package is still split into rooms
        assert [r for r in rooms if not re.search(rf"\b{re.escape(r)}/", by_entry[entry])] == [], package


def test_the_readme_points_to_the_layout():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/reference/layout.md)" in readme[readme.index("## Layout"):]


def test_the_readmes_layout_names_every_top_level_folder():
    """The README's short Layout is the tree's top level: every tracked folder (hidden ones aside)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Layout"):]
    block = section[section.index("```") + 3:section.index("```", section.index("```") + 3)]
    named = set(re.findall(r"^(\S+)/\s", block, flags=re.MULTILINE))
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    folders = {line.split("/")[0] for line in tracked.stdout.splitlines()
               if "/" in line and not line.startswith(".")}
    assert folders - named == set() and named - folders == set()
