"""What influence credit asks of a listener scorer: the teacher-forced log-probability of an answer
in what a listener reads, with one earlier message withheld or not.

A :class:`ListenerQuery` names a recorded episode, the turn of a *listener* (an agent who speaks
after a message and reads it) and, optionally, one earlier message to withhold. A
:class:`ListenerScorer` answers a batch of them (the trainer's is
``teamplay.training.play.listener_logprob.ListenerLogProb``: the protocol rebuilds the listener's
prompt from the edited prefix and the listener's adapter scores the answer in one forward pass; tests
may pass any object with ``many``). This module only fixes the contract, so credit never imports
training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from teamplay.records import Episode


@dataclass(frozen=True, eq=False)
class ListenerQuery:
    """``log p(answer | what turn `listener` of `episode` reads, message `withheld` withheld)``.

    Fields:
        episode: the recorded episode.
        listener: index of the listener's turn in ``episode.messages``; its prompt is rebuilt from
            ``episode.messages[:listener]``.
        withheld: index of the message replaced by the protocol's withheld placeholder (``"(no
            message)"``, as withholding and ``null_message`` replays do), ``< listener``; None:
            nothing withheld (the prompt the listener read).
        answer: the answer text whose tokens are forced after ``"The answer is \\boxed{"``.
    """

    episode: Episode
    listener: int
    withheld: int | None
    answer: str

    def __post_init__(self) -> None:
        if not 0 <= self.listener < len(self.episode.messages):
            raise ValueError(f"ListenerQuery: listener turn {self.listener} outside the episode's "
                             f"{len(self.episode.messages)} messages")
        if self.withheld is not None and not 0 <= self.withheld < self.listener:
            raise ValueError(f"ListenerQuery: withheld message {self.withheld} is not before the listener's "
                             f"turn {self.listener}")


@runtime_checkable
class ListenerScorer(Protocol):
    """Answers listener queries.

    ``many(queries) -> float64 [N]``: per query, the mean log-probability per answer token (<= 0) of
    its answer; two queries whose listener reads the same prompt get the same value.
    ``reads(episode, message, listener) -> bool``: whether turn ``listener`` reads message
    ``message`` (its prompt changes when the message is withheld).
    """

    def many(self, queries: Sequence[ListenerQuery]) -> np.ndarray: ...

    def reads(self, episode: Episode, message: int, listener: int) -> bool: ...
