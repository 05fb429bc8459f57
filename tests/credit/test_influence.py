"""``influence`` credit: the listener's teacher-forced log-probability of the answer with a message
against the message withheld, on top of the group-centred team reward.

The worked number recomputes both log-probabilities of a relay answerer by hand: the ChatML text of
its prompt written out here, the tiny model's own forward pass, a log-softmax over its logits.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.agents.team_model import TeamModel
from teamplay.config import ProtocolConfig
from teamplay.credit import CreditBatch, CreditResources, assign, check_credit
from teamplay.credit.methods.influence import listeners, turn_normalised
from teamplay.credit.values.group import group_advantage
from teamplay.credit.values.listener_query import ListenerQuery
from teamplay.envs.protocols.catalog.relay import ANSWER_INSTRUCTION, ANSWERER_PROMPT
from teamplay.envs.tasks import get_task
from teamplay.errors import ConfigError
from teamplay.records import Episode, Message, TaskItem
from teamplay.training.play.listener_logprob import ListenerLogProb
from teamplay.training.wiring.envs import env_factory
from tests.envs.fakes import play
from tests.tiny import tiny_model_and_tokenizer

SCALE = 20.0  # widens the random head so log-probabilities differ visibly between prompts


def scaled_tiny(seed: int = 0):
    model, tok = tiny_model_and_tokenizer(seed=seed)
    with torch.no_grad():
        model.lm_head.weight.mul_(SCALE)
    return model, tok


def relay_run(channel: bool = True):
    """A relay of two informants and an answerer on one relay_sum item; episodes whose informants
    say ``texts`` and whose answerer answers ``answers``."""
    task = get_task("relay_sum", n_operands=2)
    item = task.load("train", limit=1, seed=0)[0]
    make_env, team = env_factory(task, ProtocolConfig(name="relay", channel=channel), None)

    def episode(texts: tuple[str, str], answer: str) -> Episode:
        said = iter(texts)
        return play(make_env(), lambda r: f"The answer is {answer}." if r.role == "answerer" else next(said),
                    item=item)

    return task, item, make_env, team, episode


def direct_logprob(model, tok, chat: list[tuple[str, str]], answer: str) -> float:
    """Mean log-probability per token of ``answer + "}"`` after the ChatML rendering of ``chat``, the
    assistant header and ``The answer is \\boxed{``: one plain forward pass of ``model``."""
    text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in chat)
    text += "<|im_start|>assistant\nThe answer is \\boxed{"
    prompt = tok(text, add_special_tokens=False)["input_ids"]
    forced = tok(answer + "}", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + forced])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)  # [L, V]
    rows = range(len(prompt) - 1, len(prompt) + len(forced) - 1)  # position i predicts token i + 1
    return float(np.mean([logp[i, ids[0, i + 1]].item() for i in rows]))


def test_worked_number_on_a_tiny_model():
    task, item, make_env, team, episode = relay_run()
    eps = [episode(("My number is 3.", "It is 9."), item.reference),
           episode(("I forgot.", "It is 9."), "1")]
    team_model = TeamModel.from_team(scaled_tiny()[0], scaled_tiny()[1], team, r=4, alpha=8)
    reference, tok = scaled_tiny()  # LoRA starts at B = 0: each adapter computes the base model
    scorer = ListenerLogProb(team_model, make_env, {item.id: item})
    adv = assign("influence", CreditBatch(tuple(eps), item, task.score, task.extract, CreditResources(
        listener=scorer)), {"normalise": "none"})
    system = f"{ANSWERER_PROMPT} {task.answer_instruction}"
    problem = "Each of your 2 teammates holds one number. The answer is the sum of their numbers."
    rewards = [ep.reward for ep in eps]
    assert rewards == [1.0, 0.0]  # team advantages +1, -1 (std 0.5)
    for g, (ep, a) in enumerate(zip(eps, adv, strict=True)):
        said = [ep.messages[0].text, ep.messages[1].text]
        for t in range(2):  # informant t; its listener is the answerer (turn 2)
            shown = [(f"[informant_{j}, round 1]: {said[j] if j != t else '(no message)'}") for j in range(2)]
            told = [(f"[informant_{j}, round 1]: {said[j]}") for j in range(2)]
            base = [("system", system), ("user", problem)]
            with_m = direct_logprob(reference, tok, [*base, *(("user", s) for s in told),
                                                     ("user", ANSWER_INSTRUCTION)], item.reference)
            without = direct_logprob(reference, tok, [*base, *(("user", s) for s in shown),
                                                      ("user", ANSWER_INSTRUCTION)], item.reference)
            assert with_m != without  # exact: any difference counts: the message is in the listener's prompt
            team_adv = 1.0 if g == 0 else -1.0
            assert a[t] == pytest.approx(team_adv + (with_m - without), abs=1e-5)
        assert a[2] == pytest.approx(1.0 if g == 0 else -1.0, abs=1e-9)  # the answerer: the team's alone
    queries = [ListenerQuery(eps[0], 2, None, item.reference), ListenerQuery(eps[0], 2, 0, item.reference)]
    assert scorer.many(queries).shape == (2,)


def test_listeners_are_the_later_turns_that_read_the_message():
    _, item, make_env, _, episode = relay_run()
    scorer = ListenerLogProb(None, make_env, {item.id: item})  # reads() needs no model
    ep = episode(("My number is 3.", "It is 9."), item.reference)
    assert listeners(ep, lambda t, u: scorer.reads(ep, t, u)) == [2, 2, None]
    # debate: a round-0 message is read in round 1, not in round 2 (latest per agent only)
    from tests.envs.fakes import FakeTask, truthful

    make_debate, _ = env_factory(FakeTask(), ProtocolConfig(name="debate", options={"rounds": 2}), None)
    fake_item = TaskItem(id="fake/1", prompt="What is 1 + 2?", reference="3")
    debate = play(make_debate(), truthful, item=fake_item)
    by_turn = ListenerLogProb(None, make_debate, {fake_item.id: fake_item})
    found = listeners(debate, lambda t, u: by_turn.reads(debate, t, u))
    n = len({m.agent for m in debate.messages})
    assert found[0] == 2 * n - 1  # the last debater of round 1
    assert found[-n:] == [None] * n  # the last round reaches no one


def test_without_a_channel_no_message_has_a_listener():
    task, item, make_env, team, episode = relay_run(channel=False)
    eps = [episode(("My number is 3.", "It is 9."), item.reference), episode(("Hm.", "It is 9."), "1")]
    scorer = ListenerLogProb(None, make_env, {item.id: item})
    adv = assign("influence", CreditBatch(tuple(eps), item, task.score, task.extract,
                                          CreditResources(listener=scorer)))
    grpo = assign("grpo", CreditBatch(tuple(eps), item, task.score, task.extract))
    assert [a.tolist() for a in adv] == [a.tolist() for a in grpo]  # no forward pass was needed
    assert scorer.stats.rows == 0


class FakeScorer:
    """Listener of every message: the last turn of another agent in a later round; log-probs drawn
    per (episode, listener, withheld) from ``values``."""

    def __init__(self, values: dict) -> None:
        self.values = values

    def reads(self, episode, message, listener) -> bool:
        return True

    def many(self, queries):
        return np.array([self.values[(q.episode.group_id, q.listener, q.withheld)] for q in queries])


def chain(g: int, reward: float, k: int, skipped: frozenset[int] = frozenset()) -> Episode:
    msgs = tuple(Message(f"solver_{t}", "solver", t, "solve", "" if t in skipped else f"The answer is {t}.",
                         spoke=t not in skipped) for t in range(k))
    return Episode("p", f"g{g}", tuple(m.agent for m in msgs), msgs, str(k - 1), reward)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=5), st.integers(2, 4),
       st.data())
def test_invariants(rewards, k, data):
    logp = st.floats(-8.0, 0.0, allow_nan=False)
    skipped = data.draw(st.frozensets(st.integers(0, k - 1), max_size=k - 1))
    eps = tuple(chain(g, r, k, skipped) for g, r in enumerate(rewards))
    values = {(f"g{g}", u, w): data.draw(logp) for g in range(len(eps)) for u in range(k)
              for w in (None, *range(u))}
    batch = CreditBatch(eps, TaskItem("p", "q", "7"), resources=CreditResources(listener=FakeScorer(values)))
    adv = assign("influence", batch)
    team = group_advantage(rewards)
    spoken = [t for t in range(k) if t not in skipped]
    last = spoken[-1]
    for g, a in enumerate(adv):
        assert a.shape == (k,) and np.all(np.isfinite(a))
        assert all(a[t] == 0.0 for t in skipped)  # exact: a skipped turn's 0.0 is written, not computed
        assert a[last] == team[g]  # exact: the final answerer's value is the team advantage, copied
    for t in spoken[:-1]:  # z-terms of one turn sum to 0 over the group
        assert sum(a[t] for a in adv) == pytest.approx(float(np.sum(team)), abs=1e-9)
    no_influence = assign("influence", batch, {"coef": 0.0})
    grpo = assign("grpo", CreditBatch(eps, TaskItem("p", "q", "7")))
    pairs = zip(no_influence, grpo, strict=True)
    assert all(np.array_equal(a, b) for a, b in pairs)  # exact: no listener: grpo's advantage, by one function


def test_turn_normalisation_worked_example():
    # turn 0 influences 1, 3, (none); turn 1: 2 alone -> z = 0
    nan = np.nan
    z = turn_normalised([np.array([1.0, 2.0]), np.array([3.0, nan]), np.array([nan, nan])], 1e-8)
    # mean 2, population std 1: z = -1, +1
    assert [x.tolist() for x in z] == [[-1.0, 0.0], [1.0, 0.0], [0.0, 0.0]]


def test_reference_or_final_answer_is_scored():
    seen = []

    class Recording(FakeScorer):
        def many(self, queries):
            seen.extend(q.answer for q in queries)
            return np.zeros(len(queries))

    eps = (chain(0, 1.0, 2), chain(1, 0.0, 2))
    known, unknown = TaskItem("p", "q", "7"), TaskItem("p", "q", "")
    for options, item, expected in [({}, known, "7"), ({"target": "final"}, known, "1"), ({}, unknown, "1")]:
        seen.clear()
        assign("influence", CreditBatch(eps, item, resources=CreditResources(listener=Recording({}))), options)
        assert seen and set(seen) == {expected}


def test_needs_the_listener_resource():
    with pytest.raises(ConfigError, match="listener"):
        check_credit("influence", {}, "relay", frozenset({"transcript_scorer"}))
    with pytest.raises(ConfigError, match="normalise"):
        check_credit("influence", {"normalise": "episode"}, "relay", None)


def test_bad_queries_are_refused():
    ep = chain(0, 1.0, 2)
    with pytest.raises(ValueError, match="not before"):
        ListenerQuery(ep, 1, 1, "7")
    with pytest.raises(ValueError, match="outside"):
        ListenerQuery(ep, 2, None, "7")


def test_runs_in_a_training_step(tmp_path):
    from tests.training.test_replay_credit import table_trainer

    trainer, _ = table_trainer(tmp_path, {"method": "influence"})
    result = trainer.step()
    logged = trainer.episode_log(result)
    rewards = [ep["reward"] for ep in logged]
    team = group_advantage(rewards)
    for ep, a in zip(logged, team, strict=True):
        adv = np.array(ep["advantages"])
        assert adv.shape == (3,) and np.all(np.isfinite(adv))
        assert adv[2] == pytest.approx(a, abs=1e-12)  # the last proposal: no later listener
    # proposal -> reviewer, review -> proposer: 4 episodes x 2 messages, each a present and a
    # withheld row; rows with the same prompt are scored once
    assert result.metrics["influence_queries"] == 16
    assert 8 < result.metrics["influence_rows"] <= 16
    assert any(abs(ep["advantages"][0] - a) > 1e-6 for ep, a in zip(logged, team, strict=True))
