"""Registered credit methods: hand-worked numbers and each method's stated invariant."""

import numpy as np
import pytest

from teamplay.credit.methods.group_baseline import GroupOptions
from teamplay.credit.methods.shapley import ShapleyOptions, agent_shapley
from teamplay.credit.registry import CreditBatch, CreditResources, assign, credit_methods
from teamplay.credit.values.characteristic import last_answer_scorer
from teamplay.envs.voting import majority
from teamplay.records import Episode, Message, TaskItem

ITEM = TaskItem("arith/0", "What is 2+2?", "4")
#: float64 machine epsilon, 2**-52; the unit roundoff of one rounded operation is EPS / 2
EPS = np.finfo(np.float64).eps


def score(text, item):
    return 1.0 if text.strip() == item.reference else 0.0


def vote_episode(answers, reward=None, texts=None, group="g", extra_messages=()):
    agents = tuple(f"solver_{i}" for i in range(len(answers)))
    texts = texts or [f"The answer is {a}." for a in answers]
    msgs = tuple(Message(a, "solver", 0, "solve", t, completion_ids=(1,) * (3 + i), answer=x)
                 for i, (a, x, t) in enumerate(zip(agents, answers, texts, strict=True)))
    final = majority(answers)
    r = reward if reward is not None else (1.0 if final == "4" else 0.0)
    return Episode("arith/0", group, agents, msgs + tuple(extra_messages), final, r,
                   agent_answers=dict(zip(agents, answers, strict=True)),
                   agent_correct={a: (1.0 if x == "4" else 0.0)
                                  for a, x in zip(agents, answers, strict=True)})


def batch(episodes, **resources):
    return CreditBatch(tuple(episodes), ITEM, score, lambda t: t, CreditResources(**resources))


def test_all_methods_registered():
    assert {"grpo", "gspo", "shapley", "shapley_prm", "shape_max", "coverage"} <= set(credit_methods())
    assert GroupOptions().ddof == 0


# ------------------------------------------------------------------------------------------ grpo

def test_grpo_broadcast_skip_and_zero_sum():
    skip = Message("solver_0", "solver", 1, "revise", "", spoke=False)
    eps = [vote_episode(["4", "4"], extra_messages=(skip,)), vote_episode(["5", "5"]),
           vote_episode(["5", "5"]), vote_episode(["4", "4"])]
    out = assign("grpo", batch(eps))
    # rewards [1, 0, 0, 1] -> population std -> [1, -1, -1, 1]; the skipped turn gets 0
    assert out[0].tolist() == [1.0, 1.0, 0.0]  # exact: rewards 0/1: mean 0.5, std 0.5, advantages exactly +-1
    assert out[1].tolist() == [-1.0, -1.0]  # exact: rewards 0/1: mean 0.5, std 0.5, advantages exactly +-1
    assert sum(a[0] for a in out) == pytest.approx(0.0)
    assert [a.tolist() for a in assign("gspo", batch(eps))] == [a.tolist() for a in out]
    ub = assign("grpo", batch(eps), {"ddof": 1})
    assert ub[0][0] == pytest.approx(0.866025, abs=1e-6)


def test_input_validation():
    with pytest.raises(ValueError, match="empty group"):
        assign("grpo", batch([]))
    with pytest.raises(ValueError, match="non-finite"):
        assign("grpo", batch([vote_episode(["4"], reward=float("nan"))]))
    with pytest.raises(ValueError, match="one team"):
        assign("shapley", batch([vote_episode(["4", "4"]), vote_episode(["4", "4", "4"])]))
    with pytest.raises(ValueError, match="score and item"):
        assign("shapley", CreditBatch((vote_episode(["4"]),)))
    with pytest.raises(ValueError, match="transcript_scorer"):
        assign("shapley", batch([vote_episode(["4"])]), {"value": "masking"})
    with pytest.raises(ValueError, match="replay"):
        assign("shapley", batch([vote_episode(["4"])]), {"value": "replay"})
    bad = lambda ts: np.full(len(ts), 1.5)  # noqa: E731
    with pytest.raises(ValueError, match="outside the declared range"):
        assign("shapley", batch([vote_episode(["4"])], transcript_scorer=bad), {"value": "masking"})


# --------------------------------------------------------------------------------------- shapley

def test_shapley_vote_hand_worked():
    # ep0 answers [4, 4, 5]: phi = [0.5, 0.5, 0] (see test_characteristic); ep1 [5, 5, 5]: phi = 0.
    # per agent: c0 = c1 = [0.25, -0.25], c2 = 0; n*c = [0.75, -0.75];
    # sigma^2 = 4 * 0.75^2 / (3 * 2) = 0.375 -> sigma 0.612372; A = 0.75 / 0.612372 = 1.224745.
    eps = [vote_episode(["4", "4", "5"]), vote_episode(["5", "5", "5"])]
    out = assign("shapley", batch(eps))
    assert out[0] == pytest.approx([1.224745, 1.224745, 0.0], abs=1e-6)
    assert out[1] == pytest.approx([-1.224745, -1.224745, 0.0], abs=1e-6)
    mean_only = assign("shapley", batch(eps), {"mode": "mean_only"})
    assert mean_only[0] == pytest.approx([0.75, 0.75, 0.0], abs=1e-12)


def test_shapley_efficiency_exact_and_mc():
    eps = [vote_episode(["4", "5", "4", None]), vote_episode(["5", "5", "4", "4"])]
    exact = agent_shapley(batch(eps), ShapleyOptions())
    mc = agent_shapley(batch(eps), ShapleyOptions(exact_max_agents=2, permutations=30))
    for g, ep in enumerate(eps):
        v_full = 1.0 if majority(list(ep.agent_answers.values())) == "4" else 0.0
        assert exact[g].sum() == pytest.approx(v_full, abs=1e-12)  # v(empty) = 0
        assert mc[g].sum() == pytest.approx(v_full, abs=1e-12)
    # an agent with no answer is a null player: its 16 terms +-w(|T|) v(T) cancel in pairs, but BLAS sums
    # them in a kernel-dependent order, so 0 to gamma_16 ~ 16 (EPS / 2) times sum |w v| <= 2 (0/1 values)
    assert exact[0, 3] == pytest.approx(0.0, abs=16 * EPS)


def test_shapley_zero_sum_per_agent_and_text_locality():
    rng = np.random.default_rng(0)
    eps = [vote_episode(list(rng.choice(["4", "5", "6"], 4))) for _ in range(6)]
    out = np.stack(assign("shapley", batch(eps)))  # [G, n] (one message per agent)
    assert np.abs(out.sum(axis=0)).max() < 1e-9
    # rewriting agent 1's message texts (answers unchanged) changes no advantage under "vote"
    eps2 = [vote_episode(list(ep.agent_answers.values()), texts=["a", "totally different", "c", "d"])
            for ep in eps]
    assert np.stack(assign("shapley", batch(eps2))) == pytest.approx(out, abs=0)


def test_shapley_masking_and_replay_values():
    eps = [vote_episode(["5", "4"]), vote_episode(["5", "5"])]
    scorer = last_answer_scorer(lambda a: 1.0 if a == "4" else 0.0)
    # masking, ep0: v({}) = 0, v({0}) = 0 ("5"), v({1}) = 1, v(all) = 1 ("4" is last) -> phi = [0, 1]
    out = assign("shapley", batch(eps, transcript_scorer=scorer), {"value": "masking", "mode": "mean_only"})
    # ep1 phi = [0, 0]; c1 = [0.5, -0.5] -> n*c = [1, -1]
    # exact: two agents: weights 1/2 on 0/1 values, every sum dyadic
    assert out[0].tolist() == [0.0, 1.0] and out[1].tolist() == [0.0, -1.0]
    replay = lambda ep, kept: [1.0 if "solver_1" in kept and ep is eps[0] else 0.0]  # noqa: E731
    out = assign("shapley", batch(eps, replay=replay), {"value": "replay", "mode": "mean_only"})
    assert out[0].tolist() == [0.0, 1.0]  # exact: two agents: weights 1/2 on 0/1 values, every sum dyadic


# ----------------------------------------------------------------------------------- shapley_prm

def _prm_episodes():
    # each solver also writes a follow-up message with no answer; solver_0 restates a wrong answer
    eps = []
    for answers in (["4", "4", "5"], ["5", "4", "5"], ["5", "5", "5"]):
        ep = vote_episode(answers)
        extra = tuple(Message(a, "solver", 1, "revise", "I agree.", answer=None) for a in ep.agents)
        extra = (Message("solver_0", "solver", 1, "revise", "Maybe 7.", answer="7"),) + extra[1:]
        eps.append(Episode(ep.problem_id, ep.group_id, ep.agents, ep.messages + extra, ep.final_answer,
                           ep.reward, ep.agent_answers, ep.agent_correct))
    return eps


def test_shapley_prm_conservation_and_agreement():
    eps = _prm_episodes()
    agent_adv = np.stack(assign("shapley", batch(eps)))  # [G, 6]: messages 0..2 then 3..5
    prm = assign("shapley_prm", batch(eps))
    for g, ep in enumerate(eps):
        for i, agent in enumerate(ep.agents):
            idx = ep.messages_by(agent)
            assert prm[g][idx].sum() == pytest.approx(len(idx) * agent_adv[g, i], abs=1e-9)
        bound = 1.0 + np.abs(agent_adv).max()
        assert np.abs(prm[g]).max() <= bound + 1e-9
    # with message_score giving equal q to an agent's messages the two methods agree: use a
    # transcript scorer that ignores the transcript (all leave-one-out gains 0)
    flat = assign("shapley_prm", batch(eps, transcript_scorer=lambda ts: np.full(len(ts), 0.5)),
                  {"message_score": "masking"})
    for g in range(len(eps)):
        assert flat[g] == pytest.approx(agent_adv[g], abs=1e-12)


def test_shapley_prm_locality():
    eps = _prm_episodes()
    base = assign("shapley_prm", batch(eps))
    # change what solver_2's follow-up message says (its answer inside the message), not its vote
    changed = []
    for ep in eps:
        msgs = list(ep.messages)
        msgs[5] = Message("solver_2", "solver", 1, "revise", "It is 4.", answer="4")
        changed.append(Episode(ep.problem_id, ep.group_id, ep.agents, tuple(msgs), ep.final_answer,
                               ep.reward, ep.agent_answers, ep.agent_correct))
    new = assign("shapley_prm", batch(changed))
    for g, ep in enumerate(eps):
        for agent in ("solver_0", "solver_1"):
            idx = ep.messages_by(agent)
            assert new[g][idx] == pytest.approx(base[g][idx], abs=0)
        idx2 = ep.messages_by("solver_2")
        assert new[g][idx2].sum() == pytest.approx(base[g][idx2].sum(), abs=1e-12)


# ------------------------------------------------------------------------------------- shape_max

def test_shape_max_spec_example_with_aggregator():
    # candidates u_0 = [0.9, 0.1, 0], u_1 = [0.5, 0.5, 0.4] (docs/credit/specification.md#shapley-max); an
    # aggregator agent without an agent_correct entry gets the set-level advantage [1, -1].
    agents = ("solver_0", "solver_1", "solver_2", "judge_0")
    eps = []
    for u, R in (([0.9, 0.1, 0.0], 0.9), ([0.5, 0.5, 0.4], 0.5)):
        msgs = tuple(Message(a, a[:-2], 0, "solve", "x", completion_ids=(1, 2)) for a in agents)
        eps.append(Episode("arith/0", "g", agents, msgs, "4", R,
                           agent_correct=dict(zip(agents[:3], u, strict=True))))
    out = assign("shape_max", batch(eps))
    assert out[0] == pytest.approx([2.172715, -0.645942, -0.822108, 1.0], abs=1e-6)
    assert out[1] == pytest.approx([-0.176166, -0.176166, -0.352332, -1.0], abs=1e-6)
    assert sum(a[:3].sum() for a in out) == pytest.approx(0.0, abs=1e-9)  # base 0: zero-sum
    same_len = assign("shape_max", batch(eps), {"length_normalise": True})
    assert same_len[0] == pytest.approx(out[0], abs=1e-12)  # equal lengths: identity
    with pytest.raises(ValueError, match="agent_correct"):
        assign("shape_max", batch([Episode("arith/0", "g", agents, (), None, 0.0)]))


# -------------------------------------------------------------------------------------- coverage

class FakeEmbedder:
    """Maps a text to a fixed 2-D vector (E4.4's embeddings)."""

    table = {"A": [1, 0], "A again": [1, 0], "B": [0, 1], "wrong": [0.6, 0.8]}

    def embed(self, texts):
        return np.array([self.table[t] for t in texts], dtype=float)


def test_coverage_e44():
    eps = []
    for text, r in (("A", 1.0), ("A again", 1.0), ("B", 1.0), ("wrong", 0.0)):
        msgs = (Message("solver_0", "solver", 0, "solve", text),)
        eps.append(Episode("arith/0", "g", ("solver_0",), msgs, None, r))
    out = assign("coverage", batch(eps, embedder=FakeEmbedder()))
    got = [a[0] for a in out]
    assert got == pytest.approx([0.382224, 0.382224, 0.924608, -1.689056], abs=1e-6)
    assert sum(got) == pytest.approx(0.0, abs=1e-12)


def test_speed_benchmark_runs_quick():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "credit_speed.py"
    spec = importlib.util.spec_from_file_location("credit_speed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    res = module.run(quick=True)
    assert res["shapley_exact_8_agents"]["episodes"] == 128
    assert set(res["training_batch_8x8_4_agents_seconds"]) == {"grpo", "gspo", "shapley", "shapley_prm",
                                                              "shape_max"}
