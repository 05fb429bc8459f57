"""A built-in credit method is one file: its options, its function and its card, registered together.

The test writes such a file (as it would sit in ``teamplay/credit/methods/``) into a folder of its
own, imports it as a module, and checks that the one import is all it takes: the registry runs it,
``teamplay credit --card`` shows the card it declared, and a training step of the tiny model trains
on its advantages (``teamplay train`` with ``credit.method`` set to its name).
"""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import numpy as np
import pytest
from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.credit import CREDIT, CreditBatch, assign, credit_methods
from teamplay.credit.audit.cards import card_for
from teamplay.records import Episode, Message
from tests.tiny import save_tiny, tiny_train_config

NAME = "constant_baseline"
MODULE = "one_file_constant_baseline"  # not under teamplay.: the docs and card tests list built-ins only

METHOD_FILE = textwrap.dedent('''
    """``constant_baseline``: REINFORCE with a constant baseline b, A_g = R_g - b on every spoken message."""

    from __future__ import annotations

    import numpy as np
    from pydantic import Field

    from teamplay.credit.methods.assumptions import BROADCAST
    from teamplay.credit.methods.group_baseline import broadcast
    from teamplay.credit.registry import CardText, CreditBatch, MethodOptions, register_credit


    class ConstantBaselineOptions(MethodOptions):
        """Options of ``constant_baseline``."""

        baseline: float = Field(0.5, description="The constant b subtracted from every team reward.")


    CONSTANT_BASELINE_CARD = CardText(
        "R_g - b, the team reward against a constant baseline, broadcast to every spoken message.",
        ("b is fixed before the run: it changes no expected gradient, only its variance", BROADCAST),
        ("tests/credit/test_one_file_method.py::test_a_method_in_one_file_runs_shows_its_card_and_trains",),
        "arithmetic on the G rewards")


    @register_credit("constant_baseline", ConstantBaselineOptions, "team reward minus a constant baseline",
                     card=CONSTANT_BASELINE_CARD)
    def constant_baseline_credit(batch: CreditBatch, options: ConstantBaselineOptions) -> list[np.ndarray]:
        """``R_g - baseline`` on every spoken message of episode g; skipped turns get 0."""
        return [broadcast(ep, dict.fromkeys(ep.agents, ep.reward - options.baseline)) for ep in batch.episodes]
''')


def _episode(reward: float, second_spoke: bool) -> Episode:
    messages = (Message("a", "a", 0, "say", "x"),
                Message("b", "b", 0, "say", "y" if second_spoke else "", spoke=second_spoke))
    return Episode("p", "g", ("a", "b"), messages, final_answer=None, reward=reward)


@pytest.fixture
def method_module(tmp_path, monkeypatch):
    """The method's file imported as a module (registering it); unregistered afterwards."""
    (tmp_path / f"{MODULE}.py").write_text(METHOD_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(MODULE)
    try:
        yield module
    finally:
        CREDIT._entries.pop(NAME, None)  # other tests list the registry: leave it as it was
        sys.modules.pop(MODULE, None)


def test_a_method_in_one_file_runs_shows_its_card_and_trains(method_module, tmp_path):
    assert NAME in credit_methods() and credit_methods()[NAME].fn is method_module.constant_baseline_credit
    # the registry runs it: rewards 1 and 0 against b = 0.25 give 0.75 and -0.25; the skipped turn 0
    episodes = (_episode(1.0, second_spoke=False), _episode(0.0, second_spoke=True))
    out = assign(NAME, CreditBatch(episodes), {"baseline": 0.25})
    np.testing.assert_array_equal(out[0], [0.75, 0.0])  # exact: R - b of dyadic rewards, exact in binary
    np.testing.assert_array_equal(out[1], [-0.25, -0.25])  # exact: R - b of dyadic rewards, exact in binary
    # its card is the one the file declared, collected from the registry
    card = card_for(NAME)
    assert card.declared and card.estimand.startswith("R_g - b") and "broadcast" in card.assumptions[1]
    assert card.falsified_by == ("tests/credit/test_one_file_method.py::"
                                 "test_a_method_in_one_file_runs_shows_its_card_and_trains",)
    # and a training step of the tiny model uses it by name: each message's advantage is R - b
    config = tiny_train_config(save_tiny(tmp_path / "model"), tmp_path / "run", steps=1, checkpoint_every=1,
                               log_episodes=4, credit={"method": NAME, "options": {"baseline": 0.5}},
                               rollout={"problems_per_step": 1, "group_size": 4})
    (tmp_path / "train.yaml").write_text(json.dumps(config))  # JSON is YAML
    result = CliRunner().invoke(app, ["train", "--config", str(tmp_path / "train.yaml")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    for row in rows:  # protocol single: one spoken message; b = 0.5 makes every advantage +-0.5, never 0
        assert row["advantages"] == pytest.approx([row["reward"] - 0.5], abs=1e-6)
