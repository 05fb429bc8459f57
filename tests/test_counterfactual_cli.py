"""`teamplay train` from a config file with the counterfactual credit methods (loto, a2tgpo,
continuation, shapley value=replay) on the tiny model: each trains, and the run folder records how
each credited message was valued (for replay, the coalition values behind it)."""

from __future__ import annotations

import json
import textwrap

import pytest
from typer.testing import CliRunner

from teamplay.cli import app
from tests.tiny import save_tiny, tiny_train_config

# a user task with signal for a random tiny model: a lower-case first character (~10% of bytes)
LOWER_TASK = textwrap.dedent('''
    from teamplay.envs.tasks.base import Task
    from teamplay.records import TaskItem


    class LowerTask(Task):
        name = "lower"
        splits = ("train", "test")
        answer_instruction = "Start with a lower-case letter."

        def load(self, split="test", source=None, limit=None, seed=0):
            return [TaskItem(id=f"lower/{split}/{i}", prompt=f"Problem {i}: speak.",
                             reference="abcdefghijklmnopqrstuvwxyz") for i in range(limit or 8)]

        def extract(self, completion):
            return completion[:1] or None

        def score(self, completion, item):
            return float(completion[:1] != "" and completion[:1] in item.reference)
''')

CREDITS = {
    "loto": {"method": "loto", "options": {"value": "replay"}},
    "a2tgpo": {"method": "a2tgpo"},
    "continuation": {"method": "continuation", "options": {"samples": 2, "budget": 4.0}},
    "shapley_replay": {"method": "shapley", "options": {"value": "replay", "samples": 2}},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CREDITS))
def test_counterfactual_method_trains_from_a_config(tmp_path, name):
    (tmp_path / "lower.py").write_text(LOWER_TASK)
    model = save_tiny(tmp_path / "tiny")
    config = tmp_path / "train.yaml"
    config.write_text(json.dumps(tiny_train_config(
        model, tmp_path / "run", task_name=f"{tmp_path / 'lower.py'}:LowerTask", problems_per_step=2, group_size=4,
        max_new_tokens=2,
        # 3 rounds: a review can change the final proposal (with 2 it never matters, and replay
        # Shapley then needs no generation at all)
        protocol={"name": "proposer_reviewer", "options": {"rounds": 3}},
        credit=CREDITS[name], optim={"lr": 0.01}, steps=2, checkpoint_every=2, log_episodes=8)))
    result = CliRunner().invoke(app, ["train", "--config", str(config)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    run = tmp_path / "run"
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert sum(s.get("samples", 0) for s in steps) > 0  # credit ran on groups with signal
    episodes = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert episodes and all(ep["credit"]["method"] == CREDITS[name]["method"] for ep in episodes)
    if name != "a2tgpo":
        assert any(ep["credit"]["replay_values"] for ep in episodes)
        assert any(s.get("replay_tokens", 0) > 0 for s in steps)
