"""The policy's probability of the gold answer after a transcript prefix (A2TGPO's ``p(y* | h_t)``).

One teacher-forced pass scores a batch of prefixes: for prefix ``h`` of ``n`` messages of an
episode, the chat is the task's answer instruction (system), the problem followed by the first
``n`` spoken messages (user, ``[agent, round r]: text`` blocks), and the generation prompt; the
assistant text is forced to ``"The answer is \\boxed{"`` and the value is the per-token
(geometric-mean) probability of the reference's tokens plus ``"}"`` after it: the product over a
long answer underflows to 0 and would make every information gain 0; the geometric mean orders
prefixes the same way for one answer and stays in a usable range. The policy is the adapter of the episode's first agent
(the proposer or first solver: the role whose answer the protocols take first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from teamplay.agents.prompts import build_prompt_ids
from teamplay.agents.roles import Team
from teamplay.records import ChatMessage, Episode, TaskItem

ANSWER_LEAD = "The answer is \\boxed{"


@dataclass(frozen=True, eq=False, repr=False)  # a scorer: compared by identity, no repr of the model
class AnswerProbability:
    """``prob(episode, n) -> float`` and ``prob.many([(episode, n), ...]) -> float64 [N]``.

    Fields:
        team_model: the ``TeamModel`` (its tokenizer and ``completion_logprobs``).
        team: the team (the adapter of each agent's role).
        items: problems by id (the gold answer is ``item.reference``).
        instruction: the task's answer instruction (system prompt).
        max_prompt_tokens: prompt bound (the backend's), longer prefixes are cut as generation does.
        batch_size: rows per forward pass.
    """

    team_model: Any
    team: Team
    items: dict[str, TaskItem]
    instruction: str
    max_prompt_tokens: int = 2048
    batch_size: int = 32

    def __call__(self, episode: Episode, n: int) -> float:
        return float(self.many([(episode, n)])[0])

    def _row(self, episode: Episode, n: int) -> tuple[list[int], list[int], str | None]:
        item = self.items.get(episode.problem_id)
        if item is None:
            raise ValueError(f"answer_probability: no item for problem {episode.problem_id!r}")
        shown = "\n\n".join(f"[{m.agent}, round {m.round + 1}]: {m.text}"
                            for m in episode.messages[:n] if m.spoke)
        chat = [ChatMessage("system", self.instruction),
                ChatMessage("user", item.prompt + (f"\n\n{shown}" if shown else "") + "\n\nFinal answer?")]
        tok = self.team_model.tokenizer
        prompt, _ = build_prompt_ids(tok, chat, self.max_prompt_tokens)
        prompt = prompt + list(tok(ANSWER_LEAD, add_special_tokens=False)["input_ids"])
        answer = list(tok(item.reference + "}", add_special_tokens=False)["input_ids"])
        adapter = self.team.role_of(episode.agents[0]).adapter_name
        return prompt, answer, adapter

    def many(self, pairs: Sequence[tuple[Episode, int]]) -> np.ndarray:
        rows = [self._row(ep, n) for ep, n in pairs]
        return np.clip(np.exp(mean_forced_logprobs(self.team_model, rows, self.batch_size)), 0.0, 1.0)


def mean_forced_logprobs(team_model: Any, rows: Sequence[tuple[list[int], list[int], str | None]],
                         batch_size: int = 32) -> np.ndarray:
    """float64 [N]: per row ``(prompt ids, forced ids, adapter)``, the mean log-probability per
    forced token of the forced ids after the prompt under the adapter (None: the base model); one
    no-grad teacher-forced pass per ``batch_size`` rows of one adapter."""
    out = np.empty(len(rows))
    order: dict[str | None, list[int]] = {}
    for i, (_, _, adapter) in enumerate(rows):
        order.setdefault(adapter, []).append(i)
    with torch.no_grad():
        for adapter, members in order.items():
            for lo in range(0, len(members), batch_size):
                part = members[lo:lo + batch_size]
                logp, mask = team_model.completion_logprobs(
                    [rows[i][0] for i in part], [rows[i][1] for i in part], adapter=adapter)  # [b, C]
                mean = (logp * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)  # [b]
                out[part] = mean.double().cpu().numpy()
    return out
