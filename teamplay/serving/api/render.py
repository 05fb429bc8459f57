"""Episodes as a chat completion: one choice per episode, usage summed over the team, and the
``teamplay`` field with each episode's transcript and per-role usage.

``choices[i].message.content`` is the team's final answer as the sentence every task extractor
reads back to the same answer, ``The answer is \\boxed{X}.`` (what scripted agents say), cut before
the first ``stop`` string; it is ``""`` when the team gave no final answer. Prompt tokens are the
prompt token ids of each model call (scripted and skipped turns have none); completion tokens the
generated ones; ``usage`` sums both over every message of every episode of the request.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from teamplay.agents.backends.scripted import format_answer
from teamplay.records import Episode, Message, TaskItem
from teamplay.serving.api.schema import (
    AssistantMessage,
    ChatCompletion,
    Choice,
    EpisodeInfo,
    RoleUsage,
    TeamplayInfo,
    TranscriptTurn,
    Usage,
)


def answer_text(final_answer: str | None, stop: Sequence[str] = ()) -> str:
    """The content of a choice: the answer sentence, cut before the first ``stop`` string.

    >>> answer_text("55"), answer_text(None), answer_text("55", stop=["{"])
    ('The answer is \\\\boxed{55}.', '', 'The answer is \\\\boxed')
    """
    text = "" if final_answer is None else format_answer(final_answer)
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=len(text))
    return text[:cut]


def render_completion(*, request_id: str, model: str, created: int, item: TaskItem, reference_known: bool,
                      episodes: Sequence[Episode], task: str, protocol: str,
                      stop: Sequence[str] = ()) -> ChatCompletion:
    """The completion of one request whose ``n`` episodes are ``episodes`` (choice ``i`` = episode ``i``)."""
    infos = [_episode_info(i, ep, reference_known) for i, ep in enumerate(episodes)]
    by_role = _by_role((role, u) for info in infos for role, u in info.usage_by_role.items())
    usage = Usage.of(sum(u.prompt_tokens for u in by_role.values()), sum(u.completion_tokens for u in by_role.values()))
    choices = [Choice(index=i, message=AssistantMessage(content=answer_text(ep.final_answer, stop)))
               for i, ep in enumerate(episodes)]
    info = TeamplayInfo(task=task, protocol=protocol, problem_id=item.id, reference_known=reference_known,
                        episodes=infos, usage_by_role=by_role)
    return ChatCompletion(id=request_id, created=created, model=model, choices=choices, usage=usage, teamplay=info)


def _episode_info(index: int, episode: Episode, reference_known: bool) -> EpisodeInfo:
    usage = _by_role((m.role, _usage(m)) for m in episode.messages)
    return EpisodeInfo(index=index, final_answer=episode.final_answer,
                       reward=episode.reward if reference_known else None,
                       transcript=[_turn(m) for m in episode.messages], usage_by_role=usage)


def _usage(m: Message) -> RoleUsage:
    """A message's tokens; a call when it spoke (a skipped turn costs none)."""
    return RoleUsage(prompt_tokens=len(m.prompt_ids), completion_tokens=m.n_tokens,
                     total_tokens=len(m.prompt_ids) + m.n_tokens, calls=int(m.spoke))


def _by_role(pairs: Iterable[tuple[str, RoleUsage]]) -> dict[str, RoleUsage]:
    total: dict[str, RoleUsage] = {}
    for role, u in pairs:
        total[role] = total.get(role, RoleUsage()).plus(u)
    return total


def _turn(m: Message) -> TranscriptTurn:
    return TranscriptTurn(agent=m.agent, role=m.role, stage=m.stage, round=m.round, spoke=m.spoke, text=m.text,
                          answer=m.answer, prompt_tokens=len(m.prompt_ids), completion_tokens=m.n_tokens)
