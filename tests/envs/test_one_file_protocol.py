"""A built-in protocol is one file, and so is a built-in credit method that asks for its trait.

The test writes both files (as they would sit in ``teamplay/envs/protocols/catalog/`` and
``teamplay/credit/methods/``) into a folder of its own and imports them as modules, which is all that
registers a built-in. Then the protocol runs through the conformance matrix every registered
protocol runs through (``tests/envs/conformance.py``), the method accepts it by its declared trait
and refuses a protocol without it, and a training step of the tiny model plays the protocol and
trains on the method's advantages (``teamplay train`` naming both by their registered names).
The registries are left as they were (other tests list them).
"""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.credit import CREDIT, check_credit
from teamplay.envs.protocols import get_protocol, protocol_names
from teamplay.envs.protocols.registry import PROTOCOLS
from teamplay.errors import ConfigError
from tests.envs.conformance import check_conformance
from tests.tiny import save_tiny, tiny_train_config

PROTOCOL, METHOD = "pair_chain", "last_link_credit"
PROTOCOL_MODULE, METHOD_MODULE = "one_file_pair_chain", "one_file_last_link_credit"

PROTOCOL_FILE = textwrap.dedent('''
    """``pair_chain``: K solvers in a chain; solver k answers in round k, reading every earlier answer.
    The team's answer is the last solver's."""

    from __future__ import annotations

    from pydantic import Field

    from teamplay.agents.roles import Team
    from teamplay.envs.protocols.base import Protocol, ProtocolOptions, ProtocolState, RoleSpec, TurnSpec
    from teamplay.envs.protocols.registry import register_protocol

    SOLVER_PROMPT = "You are one solver of a chain. Check the earlier answers, then state the final answer."


    class PairChainOptions(ProtocolOptions):
        n_agents: int | None = Field(None, ge=1, le=8, description="Solvers K. None: the team decides (default 2).")


    @register_protocol
    class PairChain(Protocol):
        """K solvers in a chain, each reads the earlier ones; the last answer is the team's."""

        name = "pair_chain"
        Options = PairChainOptions
        roles = (RoleSpec("solver", SOLVER_PROMPT, count=2),)
        count_option_roles = ("solver",)
        traits = frozenset({"chain", "every_agent_answers", "last_link_final"})

        def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
            return tuple(TurnSpec(a, "solver", "solve", k) for k, a in enumerate(team.role("solver").agent_ids()))

        def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
            return "Solve the problem." if turn.round == 0 else "Check the answers above, then give the final answer."

        def final_answer(self, state: ProtocolState) -> str | None:
            last = next((m for m in reversed(state.messages) if m.spoke), None)
            return last.answer if last is not None else None
''')

METHOD_FILE = textwrap.dedent('''
    """``last_link_credit``: the team reward against a constant baseline, on the last spoken message only."""

    from __future__ import annotations

    import numpy as np
    from pydantic import Field

    from teamplay.credit.registry import CardText, CreditBatch, MethodOptions, register_credit


    class LastLinkOptions(MethodOptions):
        baseline: float = Field(0.5, description="The constant b subtracted from every team reward.")


    LAST_LINK_CARD = CardText(
        "R_g - b on the last spoken message of episode g, 0 on the others.",
        ("the last link of the chain decides the team's answer",),
        ("tests/envs/test_one_file_protocol.py::test_a_protocol_and_a_method_in_one_file_each_pass_and_train",),
        "arithmetic on the G rewards")


    @register_credit("last_link_credit", LastLinkOptions, "team reward minus a constant on the last link of a chain",
                     traits=("chain", "last_link_final"), card=LAST_LINK_CARD)
    def last_link_credit(batch: CreditBatch, options: LastLinkOptions) -> list[np.ndarray]:
        """[T_g] per episode: R_g - baseline on its last spoken message, 0 elsewhere."""
        out = []
        for ep in batch.episodes:
            adv = np.zeros(len(ep.messages))  # [T_g]
            spoken = [t for t, m in enumerate(ep.messages) if m.spoke]
            if spoken:
                adv[spoken[-1]] = ep.reward - options.baseline
            out.append(adv)
        return out
''')


@pytest.fixture
def built_ins(tmp_path, monkeypatch):
    """Both files imported as modules (registering them); the registries restored afterwards."""
    monkeypatch.setattr(PROTOCOLS, "_entries", dict(PROTOCOLS._entries))
    monkeypatch.setattr(CREDIT, "_entries", dict(CREDIT._entries))
    (tmp_path / f"{PROTOCOL_MODULE}.py").write_text(PROTOCOL_FILE)
    (tmp_path / f"{METHOD_MODULE}.py").write_text(METHOD_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield importlib.import_module(PROTOCOL_MODULE), importlib.import_module(METHOD_MODULE)
    finally:
        sys.modules.pop(PROTOCOL_MODULE, None)
        sys.modules.pop(METHOD_MODULE, None)


# PettingZoo's generic advice (use Box/Discrete spaces, NumPy observations) does not apply to text
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_protocol_and_a_method_in_one_file_each_pass_and_train(built_ins, tmp_path):
    assert PROTOCOL in protocol_names()
    check_conformance(PROTOCOL)  # what the registry-built matrix runs on every registered protocol
    check_conformance(PROTOCOL, {"n_agents": 3})
    # the method asks for the traits the protocol declares, not for its name
    assert check_credit(METHOD, {}, PROTOCOL, None) is not None
    assert check_credit(METHOD, {}, get_protocol("sequential"), None) is not None
    with pytest.raises(ConfigError, match=r"\(trait 'chain'\); protocol 'vote' does not declare it \(protocols "
                                          r"that do: pair_chain, proposer_reviewer, review, sequential\)"):
        check_credit(METHOD, {}, "vote", None)
    # one training step of the tiny model plays the protocol and trains on the method
    config = tiny_train_config(save_tiny(tmp_path / "model"), tmp_path / "run", steps=1, checkpoint_every=1,
                               log_episodes=4, protocol={"name": PROTOCOL}, credit={"method": METHOD},
                               rollout={"problems_per_step": 1, "group_size": 4})
    (tmp_path / "train.yaml").write_text(json.dumps(config))  # JSON is YAML
    result = CliRunner().invoke(app, ["train", "--config", str(tmp_path / "train.yaml")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    for row in rows:  # two solvers: the first link gets 0, the last R - 0.5 (never 0: the step is informative)
        assert row["advantages"] == pytest.approx([0.0, row["reward"] - 0.5], abs=1e-6)
