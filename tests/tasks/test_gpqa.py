"""GPQA: hand-made rows in the official CSV format; deterministic shuffle with a correct reference."""

from __future__ import annotations

import csv
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from teamplay.envs.tasks import get_task
from teamplay.envs.tasks.catalog.gpqa import shuffle_choices

HEADER = ["Record ID", "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
          "Incorrect Answer 3", "High-level domain", "Subdomain"]
# written for this test, in the format of the official gpqa_diamond.csv (GPQA itself is not public)
ROWS = [
    ["r1", "Which particle mediates the electromagnetic force?", "Photon", "Gluon", "W boson", "Graviton",
     "Physics", "Particle physics"],
    ["r2", "What is the oxidation state of Mn in KMnO4?", "+7", "+2", "+4", "+6", "Chemistry",
     "Inorganic chemistry"],
    ["r3", "Which organelle makes most of a cell's ATP?\nChoose one.", "Mitochondrion", "Ribosome",
     "Golgi apparatus", "Lysosome", "Biology", "Cell biology"],
]


@pytest.fixture
def gpqa_csv(tmp_path: Path) -> Path:
    path = tmp_path / "gpqa_diamond.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(HEADER)
        writer.writerows(ROWS)
    return path


def test_items_reference_points_at_the_correct_answer(gpqa_csv: Path) -> None:
    items = get_task("gpqa").load("test", source=gpqa_csv, seed=0)
    assert [i.id for i in items] == ["gpqa/test/0", "gpqa/test/1", "gpqa/test/2"]
    for item, row in zip(items, ROWS, strict=True):
        choices = item.metadata["choices"]
        assert sorted(choices) == sorted(row[2:6])
        assert choices["ABCD".index(item.reference)] == row[2]  # the reference letter shows the answer
        assert item.prompt.startswith(row[1] + "\n\n(A) ")
        for letter, choice in zip("ABCD", choices, strict=True):
            assert f"\n({letter}) {choice}" in item.prompt
        assert item.metadata["domain"] == row[6]


def test_shuffle_is_deterministic_and_depends_on_seed(gpqa_csv: Path) -> None:
    task = get_task("gpqa")
    first = task.load("test", source=gpqa_csv, seed=0)
    assert first == task.load("test", source=gpqa_csv, seed=0)
    orders = {tuple(i.metadata["choices"] for i in task.load("test", source=gpqa_csv, seed=s))
              for s in range(6)}
    assert len(orders) > 1


def test_shuffle_is_the_same_in_another_process() -> None:
    code = ("from teamplay.envs.tasks.catalog.gpqa import shuffle_choices; "
            "print([shuffle_choices(f'q{i}', ('a', 'b', 'c', 'd'), seed=3) for i in range(20)])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}, timeout=60)
    here = [shuffle_choices(f"q{i}", ("a", "b", "c", "d"), seed=3) for i in range(20)]
    assert out.stdout.strip() == str(here)


def test_correct_answer_spreads_over_letters() -> None:
    # sha256 ranks are uniform: over 4,000 questions each letter gets 1,000 +- 4 sd (sd ~ 27)
    counts = Counter(shuffle_choices(f"question {i}", ("r", "w1", "w2", "w3"), seed=0).index(0)
                     for i in range(4000))
    assert all(abs(counts[k] - 1000) < 110 for k in range(4)), counts


def test_scoring(gpqa_csv: Path) -> None:
    task = get_task("gpqa")
    item = task.load("test", source=gpqa_csv)[0]
    wrong = next(letter for letter in "ABCD" if letter != item.reference)
    assert task.score(f"Photons carry it. The answer is ({item.reference}).", item) == 1.0
    assert task.score(f"The answer is ({wrong}).", item) == 0.0
    assert task.score("A photon, clearly.", item) == 0.0  # no explicit letter
    assert task.score_answer(item.reference, item) == 1.0
    assert task.score_answer(f"({item.reference})", item) == 1.0
    assert task.score_answer("AB", item) == 0.0
    assert task.score_answer(None, item) == 0.0


def test_csv_with_byte_order_mark(tmp_path: Path) -> None:
    # spreadsheet exports often start with a BOM; with "Question" as the first column it would
    # otherwise hide the field
    path = tmp_path / "bom.csv"
    header = ["Question"] + HEADER[2:6]
    path.write_text("\ufeff" + ",".join(header) + "\n" + ",".join([ROWS[1][1]] + ROWS[1][2:6]) + "\n",
                    encoding="utf-8")
    item = get_task("gpqa").load("test", source=path)[0]
    assert item.metadata["choices"]["ABCD".index(item.reference)] == "+7"
