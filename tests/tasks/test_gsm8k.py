"""GSM8K: loading local files and the acceptance test on the real test split."""

from __future__ import annotations

import json
from pathlib import Path

from teamplay.envs.tasks import get_task
from tests.tasks.data import data_file


def test_local_jsonl_items(tmp_path: Path) -> None:
    rows = [{"question": "Q0", "answer": "2 * 500 = <<2*500=1000>>1000\n#### 1,000"},
            {"question": "Q1", "answer": "It drops by 3.\n#### -3"},
            {"question": "Q2", "answer": "Half of 5.\n#### 2.50"}]
    path = tmp_path / "test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    items = get_task("gsm8k").load("test", source=path)
    assert [(i.id, i.prompt, i.reference) for i in items] == [
        ("gsm8k/test/0", "Q0", "1000"), ("gsm8k/test/1", "Q1", "-3"), ("gsm8k/test/2", "Q2", "2.5")]
    assert items[0].metadata["solution"].endswith("#### 1,000")
    assert [i.id for i in get_task("gsm8k").load("test", source=path, limit=2)] == ["gsm8k/test/0",
                                                                                  "gsm8k/test/1"]


def test_local_parquet(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "train.parquet"
    pq.write_table(pa.table({"question": ["Q0", "Q1"], "answer": ["#### 7", "#### 8"]}), path)
    items = get_task("gsm8k").load("train", source=path)
    assert [(i.id, i.reference) for i in items] == [("gsm8k/train/0", "7"), ("gsm8k/train/1", "8")]


def test_every_reference_solution_scores_one_and_not_the_next_item() -> None:
    path = data_file("gsm8k/test.jsonl")
    task = get_task("gsm8k")
    items = task.load("test", source=path)
    assert len(items) == 1319
    wrong = [i.id for i in items if task.score(i.metadata["solution"], i) != 1.0]
    assert wrong == []
    pairs = [(a, b) for a, b in zip(items, items[1:], strict=False) if a.reference != b.reference]
    assert len(pairs) > 1200  # most neighbours differ, so the negative check has teeth
    leaked = [a.id for a, b in pairs if task.score(a.metadata["solution"], b) != 0.0]
    assert leaked == []


def test_local_json_list(tmp_path: Path) -> None:
    path = tmp_path / "test.json"
    path.write_text(json.dumps([{"question": "Q0", "answer": "#### 4"}]), encoding="utf-8")
    assert [i.reference for i in get_task("gsm8k").load("test", source=path)] == ["4"]
