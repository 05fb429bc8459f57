"""The listener's teacher-forced log-probability of an answer, with one earlier message withheld or
not: the values of ``influence`` credit (``teamplay.credit.methods.influence``).

For a :class:`~teamplay.credit.values.listener_query.ListenerQuery` the protocol rebuilds the prompt
of the listener's turn (``EpisodeDriver.request_for``: the recorded messages before it, the withheld
one replaced by the placeholder ``"(no message)"`` as withholding's replays do, in a fresh protocol
state, so the protocol's own view rules and the no-channel arm apply); the assistant text is forced
to ``"The answer is \\boxed{"`` and the value is the mean log-probability per token of the answer and
``"}"`` after it, under the listener's adapter (the base model for a scripted listener, which has
none). Rows with the same prompt, answer and adapter are scored once, so a listener that does not
read the withheld message gets exactly the value it gets with it, and the message-present row of a
listener is shared by every message it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from teamplay.agents.prompts import build_prompt_ids
from teamplay.credit.values.listener_query import ListenerQuery
from teamplay.envs.protocols.driver import null_message
from teamplay.envs.team_env import TeamEnv
from teamplay.records import Episode, TaskItem, TurnRequest
from teamplay.training.play.answer_probability import ANSWER_LEAD, mean_forced_logprobs


@dataclass
class ListenerStats:
    """What the scorer spent: ``rows`` scored (forward rows after sharing), ``queries`` answered and
    ``prompt_tokens`` / ``forced_tokens`` of the scored rows (no token is generated)."""

    rows: int = 0
    queries: int = 0
    prompt_tokens: int = 0
    forced_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"influence_rows": self.rows, "influence_queries": self.queries,
                "influence_prompt_tokens": self.prompt_tokens, "influence_forced_tokens": self.forced_tokens}


@dataclass(eq=False, repr=False)  # a scorer: compared by identity, no repr of the model
class ListenerLogProb:
    """``many(queries) -> float64 [N]`` and ``reads(episode, message, listener) -> bool``.

    Fields:
        team_model: the ``TeamModel`` (its tokenizer and ``completion_logprobs``).
        make_env: the run's env factory (its driver rebuilds the listener's prompt).
        items: problems by id.
        max_prompt_tokens: prompt bound (the backend's); longer prompts are cut as generation cuts them.
        batch_size: rows per forward pass.
        stats: counters since the last ``begin_step`` (cumulative without it).
    """

    team_model: Any
    make_env: Callable[[], TeamEnv]
    items: dict[str, TaskItem]
    max_prompt_tokens: int = 2048
    batch_size: int = 32
    stats: ListenerStats = field(default_factory=ListenerStats)

    def __post_init__(self) -> None:
        self._env = self.make_env()

    def begin_step(self) -> None:
        """Reset the counters (the trainer calls it once per step)."""
        self.stats = ListenerStats()

    def request(self, episode: Episode, listener: int, withheld: int | None) -> TurnRequest:
        """The request of turn ``listener`` rebuilt from ``episode`` with message ``withheld`` replaced
        by the placeholder (None: as recorded)."""
        item = self.items.get(episode.problem_id)
        if item is None:
            raise ValueError(f"influence: no item for problem {episode.problem_id!r}")
        messages = list(episode.messages[:listener])
        if withheld is not None:
            messages[withheld] = null_message(messages[withheld], self._env.task)
        return self._env.driver.request_for(item, messages, listener)

    def reads(self, episode: Episode, message: int, listener: int) -> bool:
        """Whether turn ``listener`` reads message ``message``: its chat changes when it is withheld."""
        return self.request(episode, listener, None).chat != self.request(episode, listener, message).chat

    def many(self, queries: Sequence[ListenerQuery]) -> np.ndarray:
        tok = self.team_model.tokenizer
        lead = list(tok(ANSWER_LEAD, add_special_tokens=False)["input_ids"])
        keys, rows, index = [], [], {}
        for q in queries:
            request = self.request(q.episode, q.listener, q.withheld)
            prompt, _ = build_prompt_ids(tok, request.chat, self.max_prompt_tokens)
            answer = list(tok(q.answer + "}", add_special_tokens=False)["input_ids"])
            key = (tuple(prompt), tuple(answer), request.adapter)
            if key not in index:
                index[key] = len(rows)
                rows.append((prompt + lead, answer, request.adapter))
            keys.append(index[key])
        values = mean_forced_logprobs(self.team_model, rows, self.batch_size) if rows else np.zeros(0)
        self.stats.rows += len(rows)
        self.stats.queries += len(queries)
        self.stats.prompt_tokens += sum(len(r[0]) for r in rows)
        self.stats.forced_tokens += sum(len(r[1]) for r in rows)
        return values[np.asarray(keys, dtype=np.int64)] if keys else np.zeros(0)
