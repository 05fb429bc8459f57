"""Characteristic functions over agents (docs/credit/specification.md#characteristic) and the LLM judge protocol."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.credit.values.characteristic import (
    LLMJudge,
    MaskingCharacteristic,
    ReplayCharacteristic,
    Transcript,
    VoteCharacteristic,
    YesProbabilityModel,
    last_answer_scorer,
)
from teamplay.credit.values.shapley import shapley_exact
from teamplay.envs.voting import plurality
from teamplay.records import Episode, Message

#: float64 machine epsilon, 2**-52; the unit roundoff of one rounded operation is EPS / 2
EPS = np.finfo(np.float64).eps


def vote_episode(answers):
    agents = tuple(f"solver_{i}" for i in range(len(answers)))
    msgs = tuple(Message(a, "solver", 0, "solve", f"... The answer is {x}.", answer=x)
                 for a, x in zip(agents, answers, strict=True))
    return Episode("p1", "g1", agents, msgs, plurality(answers), 0.0,
                   agent_answers=dict(zip(agents, answers, strict=True)))


def right(answer):
    return 1.0 if answer == "4" else 0.0


def test_vote_table_and_shapley_by_hand():
    # answers 4, 4, 5 (right is 4). Singles {0},{1}: 1, {2}: 0. Pairs: {0,1}: 1; {0,2}: tie 4-5,
    # earliest first vote is solver_0's "4" -> 1; {1,2}: tie -> solver_1's "4" -> 1. All: 1.
    # phi_2: gains 0 (from {}), 0 ({0}->{0,2}), 0 ({1}->{1,2}), 0 ({0,1}->all) -> 0; phi_0 = phi_1 = 0.5.
    cf = VoteCharacteristic(vote_episode(["4", "4", "5"]), right)
    assert cf.table().tolist() == [0, 1, 1, 1, 0, 1, 1, 1]
    assert cf.empty_value == 0.0  # exact: the default 0.0, stored
    assert shapley_exact(3, cf.table()) == pytest.approx([0.5, 0.5, 0.0], abs=1e-12)


def test_vote_missing_answer_is_null_player():
    cf = VoteCharacteristic(vote_episode(["4", None, "4"]), right)
    # phi_1 = sum over the 8 coalitions of +-w(|T|) v(T): terms that cancel in pairs, summed by BLAS in a
    # kernel-dependent order (an AVX build leaves 2e-16), so 0 to rounding: gamma_8 ~ 8 (EPS / 2) times
    # sum_T |w v| <= 2 (v is 0/1; one player's weights sum to 1 on either sign) = 8 EPS
    assert shapley_exact(3, cf.table())[1] == pytest.approx(0.0, abs=8 * EPS)
    assert VoteCharacteristic(vote_episode([None, None]), right).table().tolist() == [0, 0, 0, 0]


@settings(max_examples=80)
@given(st.lists(st.sampled_from(["1", "2", "3", None]), min_size=1, max_size=7))
def test_vectorised_vote_equals_majority_loop(answers):
    scores = {"1": 1.0, "2": 0.5, "3": 0.0}
    cf = VoteCharacteristic(vote_episode(answers), lambda a: scores[a])
    n = len(answers)
    expected = []
    for mask in range(2**n):
        winner = plurality([answers[j] for j in range(n) if (mask >> j) & 1])
        expected.append(0.0 if winner is None else scores[winner])
    assert cf.table().tolist() == expected  # exact: both pick the same score of the winner, no arithmetic


def test_values_are_cached_and_batched():
    seen = []

    def score(a):
        seen.append(a)
        return right(a)

    cf = VoteCharacteristic(vote_episode(["4", "5"]), score)
    cf.values([1, 2, 3])
    cf.values([3, 1, 0])
    assert cf.calls == 1  # second call was fully cached
    assert sorted(seen) == ["4", "5"]  # each distinct answer scored once


def test_out_of_range_and_nan_raise():
    with pytest.raises(ValueError, match=r"coalition \['solver_0'\] \(mask 1\) is 1.5, outside"):
        VoteCharacteristic(vote_episode(["4"]), lambda a: 1.5).table()
    with pytest.raises(ValueError, match="finite"):
        VoteCharacteristic(vote_episode(["4"]), lambda a: float("nan")).table()
    with pytest.raises(ValueError, match=r"\[0, 2\^2\)"):
        VoteCharacteristic(vote_episode(["4", "5"]), right).values([4])


def dialogue():
    msgs = (
        Message("proposer_0", "proposer", 0, "propose", "I think it is 5.", answer="5"),
        Message("reviewer_0", "reviewer", 1, "review", "WRONG: 2+2 is 4.", answer="4"),
        Message("proposer_0", "proposer", 2, "revise", "", spoke=False),
    )
    return Episode("p1", "g1", ("proposer_0", "reviewer_0"), msgs, "4", 1.0)


def test_masking_placeholder_headers_and_batching():
    batches = []

    def scorer(transcripts):
        batches.append(transcripts)
        return last_answer_scorer(right)(transcripts)

    cf = MaskingCharacteristic(dialogue(), scorer, question="What is 2+2?")
    t = cf.transcript(cf.mask_of(["proposer_0"]))
    assert t.withheld == (False, True, False)
    text = t.render()
    assert "[reviewer_0 (reviewer), round 1]\n[message from reviewer withheld]" in text
    assert "I think it is 5." in text and "WRONG" not in text
    # v: {} -> question only, no answer -> 0; {proposer}: last visible answer "5" -> 0;
    # {reviewer}: its answer "4" is the last visible one (the final answer's author rule) -> 1.
    assert cf.table().tolist() == [0.0, 0.0, 1.0, 1.0]  # exact: scores 0/1 copied into the table
    assert len(batches) == 1 and len(batches[0]) == 4  # empty coalition scored in the same batch


def test_masking_fixed_empty_value_and_range():
    cf = MaskingCharacteristic(dialogue(), last_answer_scorer(right), empty_value=0.25)
    assert cf.empty_value == 0.25  # exact: the given value, stored
    with pytest.raises(ValueError, match="outside the declared range"):
        MaskingCharacteristic(dialogue(), lambda ts: np.full(len(ts), 2.0)).table()
    with pytest.raises(ValueError, match="shape"):
        MaskingCharacteristic(dialogue(), lambda ts: np.zeros(1)).table()


def test_replay_mean_over_seeds_and_noise():
    calls = []

    def replay(ep, kept):
        calls.append(kept)
        return [1.0, 0.0] if "reviewer_0" in kept else [0.0, 0.0]

    cf = ReplayCharacteristic(dialogue(), replay)
    assert cf.table().tolist() == [0.0, 0.0, 0.5, 0.5]  # exact: means of 0/1 pairs are exact
    assert frozenset({"proposer_0", "reviewer_0"}) in calls and frozenset() not in calls
    assert cf.noise == pytest.approx((0 + 0.5 + 0.5) / 3)  # std of [1,0] is 0.5, of [0,0] is 0
    with pytest.raises(ValueError, match="one score per seed"):
        ReplayCharacteristic(dialogue(), lambda ep, kept: []).table()
    with pytest.raises(ValueError, match="outside"):
        ReplayCharacteristic(dialogue(), lambda ep, kept: [3.0]).table()


class FakeYesModel:
    """P(yes) = 0.9 when the transcript shows a WRONG verdict, else 0.2; records its prompts."""

    def __init__(self, out=None):
        self.prompts = []
        self.out = out

    def yes_probability(self, prompts):
        self.prompts.extend(prompts)
        if self.out is not None:
            return np.asarray(self.out)
        return np.array([0.9 if "WRONG" in p else 0.2 for p in prompts])


def test_llm_judge_with_fake_model():
    model = FakeYesModel()
    assert isinstance(model, YesProbabilityModel)
    judge = LLMJudge(model)
    cf = MaskingCharacteristic(dialogue(), judge, question="What is 2+2?")
    assert cf.table() == pytest.approx([0.2, 0.2, 0.9, 0.9])
    assert all("What is 2+2?" in p and p.endswith("Answer yes or no.") for p in model.prompts)
    assert len(model.prompts) == 4


def test_llm_judge_rejects_bad_probabilities():
    t = Transcript("q", dialogue().messages, (False, False, False))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        LLMJudge(FakeYesModel(out=[1.2]))([t])
    with pytest.raises(ValueError, match="shape"):
        LLMJudge(FakeYesModel(out=[0.1, 0.2]))([t])
    with pytest.raises(ValueError, match="transcript"):
        LLMJudge(FakeYesModel(), template="no field")
