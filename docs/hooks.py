"""mkdocs hooks: put the repository's benchmark record into the site without copying it into docs/.

``BENCHMARKS.md`` (written by ``make bench``) becomes the page ``results/benchmarks.md`` and
``benchmarks/figures/*.png`` become ``results/benchmarks/figures/``, where the record's own links
(``benchmarks/figures/...``) point from that page; the results pages link the figures the same way.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]


def on_files(files, config):
    files.append(File.generated(config, "results/benchmarks.md", abs_src_path=str(ROOT / "BENCHMARKS.md")))
    for figure in sorted((ROOT / "benchmarks" / "figures").glob("*.png")):
        files.append(File.generated(config, f"results/benchmarks/figures/{figure.name}", abs_src_path=str(figure)))
    return files
