"""The fine-tuning set of a warm start: episodes of a teacher team, or the team's own episodes that
passed a reward threshold, and the samples they give each role.

``TeacherBackend`` plays every model-played role by its teacher (``teamplay.envs.teachers``) and
returns each text with the token ids the model would have produced it as: the prompt rendered and
cut exactly as the hf backend renders it (``build_reply_ids``), the completion the teacher's text
tokenized and closed with the model's stop token. The envs record those ids in each ``Message``,
so a teacher's episode is built like a model's and ``sft_samples`` turns both alike into
``PolicySample``s: one per message of a warm-started role, its completion the only target.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Literal

import numpy as np

from teamplay.agents.backends.base import GenerationBackend
from teamplay.agents.backends.mixed import MixedBackend
from teamplay.agents.prompts import build_reply_ids
from teamplay.records import Episode, Generation, SamplingParams, TurnRequest
from teamplay.training.learn.samples import PolicySample, build_samples

#: the answer box of a scripted policy's answer sentence (``teamplay.agents.backends.scripted``)
BOX = "\\boxed{"


class TeacherBackend(GenerationBackend):
    """Answers each request with the scripted policy of its role and the token ids of that text.

    Args:
        tokenizer: the team model's tokenizer (its chat template renders the prompts).
        policies: role name -> scripted policy spec, for every role of the team (the teachers of the
            model-played roles, the team's own policies of its scripted roles).
        max_prompt_tokens: the prompt budget of the run's backend (``backend.max_prompt_tokens``).
        stop_id: the token that ends a completion (the model's eos).
        seed: seed of the policies' randomness (``noisy_proposer``'s coin).
        answer_format: ``"boxed"`` keeps a teacher's answer sentence as its policy writes it
            (``"The answer is \\boxed{18}."``); ``"plain"`` writes it unboxed (``"The answer is 18."``,
            ``unbox``), two to four tokens shorter: what a model with a short reply budget
            (``sampling.max_new_tokens``) can learn to finish.

    A request without an adapter (a scripted role of the team) gets the text alone, as it would in
    training: nothing of it is ever a target.
    """

    name = "teacher"

    def __init__(self, tokenizer, policies: Mapping[str, str], max_prompt_tokens: int, stop_id: int,
                 seed: int = 0, answer_format: Literal["boxed", "plain"] = "boxed") -> None:
        if answer_format not in ("boxed", "plain"):
            raise ValueError(f"answer_format: 'boxed' or 'plain', got {answer_format!r}")
        self.tokenizer, self.max_prompt_tokens, self.stop_id = tokenizer, max_prompt_tokens, stop_id
        self.policies = MixedBackend(None, policies, seed=seed)
        self.answer_format = answer_format

    def generate(self, requests: Sequence[TurnRequest], sampling: SamplingParams) -> list[Generation]:
        out = []
        for request, said in zip(requests, self.policies.generate(requests, sampling), strict=True):
            if request.adapter is None:  # a scripted role of the team speaks as it does in training
                out.append(said)
                continue
            text = unbox(said.text) if self.answer_format == "plain" else said.text
            out.append(self._tokens(request, text))
        return out

    def _tokens(self, request: TurnRequest, text: str) -> Generation:
        """``text`` as a completion of ``request``'s prompt: prompt ids [P] as the hf backend builds
        them (the reply prefix included), completion ids [C] the reply after that prefix, then the stop
        token. A reply prefix the teacher did not write itself (review's ``"Verdict:"`` before an
        ``oracle``'s ``"RIGHT"``) is continued after a space, and the text is prefix + reply, as a
        model backend returns it."""
        prefix = request.reply_prefix
        prompt, truncated = build_reply_ids(self.tokenizer, request.chat, self.max_prompt_tokens, prefix)
        if text.startswith(prefix):
            body = text[len(prefix):]
        else:
            body = text if prefix[-1:].isspace() else f" {text}"
        ids = list(self.tokenizer(body, add_special_tokens=False)["input_ids"]) + [self.stop_id]
        return Generation(text=prefix + body, prompt_ids=tuple(prompt), completion_ids=tuple(ids),
                          adapter=request.adapter, truncated=truncated)


def unbox(text: str) -> str:
    r"""``text`` with every ``\boxed{...}`` replaced by what the box holds (braces balanced, so a
    LaTeX answer's own braces stay).

    >>> unbox("The answer is \\boxed{18}.")
    'The answer is 18.'
    >>> unbox("The answer is \\boxed{\\frac{1}{2}}.")
    'The answer is \\frac{1}{2}.'
    >>> unbox("The answer is \\boxed{18")  # an unclosed box is left as it is
    'The answer is \\boxed{18'
    """
    out, rest = [], text
    while (start := rest.find(BOX)) >= 0:
        depth, end = 1, start + len(BOX)
        while end < len(rest) and depth:
            depth += {"{": 1, "}": -1}.get(rest[end], 0)
            end += 1
        if depth:  # unclosed: nothing more to unbox
            break
        out.append(rest[:start] + rest[start + len(BOX):end - 1])
        rest = rest[end:]
    return "".join(out) + rest


def stop_token(team_model) -> int:
    """The token a completion of ``team_model`` ends with: the first eos id of its generation config,
    else the tokenizer's (the first stop id of the hf backend)."""
    configured = team_model.base_model.generation_config.eos_token_id
    if isinstance(configured, (list, tuple)):
        configured = configured[0] if configured else None
    stop = configured if configured is not None else team_model.tokenizer.eos_token_id
    if stop is None:
        raise ValueError("the model has no eos token id: a teacher's completion could never end")
    return int(stop)


def passing(episodes: Sequence[Episode], threshold: float) -> list[Episode]:
    """Rejection sampling's filter: the episodes whose team reward is at least ``threshold``, in order.

    >>> from teamplay.records import Episode
    >>> eps = [Episode(problem_id=str(i), group_id="g", agents=(), messages=(), final_answer=None, reward=r)
    ...        for i, r in enumerate([0.0, 1.0, 0.5])]
    >>> [e.problem_id for e in passing(eps, 0.5)]
    ['1', '2']
    """
    return [ep for ep in episodes if ep.reward >= threshold]


def sft_samples(episodes: Sequence[Episode], roles: Collection[str], adapters: Collection[str]) -> list[PolicySample]:
    """One sample per spoken message of a role in ``roles`` written with an adapter in ``adapters``
    (episode order, then message order), advantage 1: the message's completion ids are the targets,
    its prompt (the problem and every message it saw, other roles' included) the context."""
    samples = build_samples(episodes, [np.ones(len(ep.messages)) for ep in episodes], adapters)
    return [s for s in samples if s.role in roles]
