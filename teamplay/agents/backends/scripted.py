"""Deterministic text policies for tests and demos: no model, no tokens.

A scripted policy maps one ``TurnRequest`` to a text. Built-in policies:

- ``oracle``: states the reference (``"The answer is \\boxed{REF}."``); on a review turn says
  ``"RIGHT"`` when the answer under review is correct and ``"WRONG"`` otherwise.
- ``wrong``: states a wrong answer (``wrong_answer``); on a review turn gives the wrong verdict
  (``"WRONG"`` for a correct answer, ``"RIGHT"`` for a wrong one).
- ``contrarian``: states a wrong answer; on a review turn always says ``"WRONG"``.
- ``echo``: repeats the newest message before the instruction (the newest transcript entry, or
  the problem when there is none).
- ``random``: seeded random text (printable unicode, digits, LaTeX-ish symbols; 0-200 characters);
  the same (backend seed, sampling seed, episode seed, item, agent, stage, round) gives the same
  text, so the episodes of a group differ.

A custom policy is any callable ``fn(request) -> str``; ``request.seed`` is the episode's seed, so a
policy can vary across the episodes of a group without hidden state.

Answer format: ``"The answer is \\boxed{REF}."`` is parsed by every task extractor (numeric answers
take the last box, letters accept a boxed letter and "answer is", LaTeX answers take the last box).

Every stage of every protocol, built-in or a user's, is answered: a turn whose request
``expects == "verdict"`` (a stage the protocol lists in ``verdict_stages``, e.g. proposer_reviewer's
``review``) gets RIGHT or WRONG on the metadata's ``"pending_answer"`` (the extracted answer under
review; ``None`` when there was none, judged as a wrong answer); every other turn gets an answer.
Correctness of the pending answer is ``is_correct(pending, item)``: by default the same canonical
string (whitespace removed) or the same number (``"18.0"`` equals ``"18"``); pass a task's scorer
for anything finer.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation

from teamplay.agents.backends.base import GenerationBackend
from teamplay.errors import ConfigError
from teamplay.records import Generation, SamplingParams, TaskItem, TurnRequest

Policy = Callable[[TurnRequest], str]
Judge = Callable[[str, TaskItem], bool]

LETTERS = "ABCD"
_RANDOM_ALPHABET = "abcdefghijklmnopqrstuvwxyz ABCDEFG0123456789 .,:;!?-+=*/\\{}()$#\n\t éü日本語∑∫"


def format_answer(answer: str) -> str:
    """The sentence a scripted agent uses to state ``answer``.

    >>> format_answer("18")
    'The answer is \\\\boxed{18}.'
    """
    return f"The answer is \\boxed{{{answer}}}."


def wrong_answer(reference: str) -> str:
    """An answer that differs from ``reference``: a number plus one, the next letter of A-D
    (D wraps to A), or LaTeX ``REF+1``.

    >>> wrong_answer("18"), wrong_answer("-2.5"), wrong_answer("D"), wrong_answer("\\\\frac{1}{2}")
    ('19', '-1.5', 'A', '\\\\frac{1}{2}+1')
    """
    ref = reference.strip()
    number = _number(ref)
    if number is not None:
        return str(number + 1)
    if len(ref) == 1 and ref in LETTERS:
        return LETTERS[(LETTERS.index(ref) + 1) % len(LETTERS)]
    return f"{ref}+1"


def _number(text: str) -> Decimal | None:
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def same_answer(answer: str, item: TaskItem) -> bool:
    """Default correctness of an extracted answer: equal numbers, else equal text without spaces."""
    a, b = _number(answer.strip()), _number(item.reference.strip())
    if a is not None and b is not None:
        return a == b
    return "".join(answer.split()) == "".join(item.reference.split())


class ScriptedBackend(GenerationBackend):
    """Answers every request with a scripted policy.

    Args:
        policy: a built-in policy name (``POLICIES``) or a callable ``fn(request) -> str``.
        seed: seed of the ``random`` policy.
        is_correct: correctness of a pending answer for review verdicts (default ``same_answer``).

    Generations carry text only (no token ids or log-probs) and the request's adapter.
    """

    name = "scripted"

    def __init__(self, policy: str | Policy = "oracle", seed: int = 0,
                 is_correct: Judge = same_answer) -> None:
        self.seed = seed
        self.is_correct = is_correct
        if callable(policy):
            self._policy: Callable[[TurnRequest, SamplingParams], str] = lambda r, _s: policy(r)
            self.policy_name = getattr(policy, "__name__", "custom")
        elif policy in POLICIES:
            method = POLICIES[policy]
            self._policy = lambda r, s: method(self, r, s)
            self.policy_name = policy
        else:
            raise ConfigError(f"backend.policy: unknown scripted policy {policy!r}; known: "
                              f"{sorted(POLICIES)} or a callable fn(request) -> str")

    def generate(self, requests: Sequence[TurnRequest], sampling: SamplingParams) -> list[Generation]:
        return [Generation(text=self._policy(r, sampling), adapter=r.adapter) for r in requests]

    # ------------------------------------------------------------------ policies
    def _oracle(self, request: TurnRequest, _sampling: SamplingParams) -> str:
        item = _item(request, "oracle")
        if _is_review(request):
            return "RIGHT" if self._pending_correct(request, item) else "WRONG"
        return format_answer(item.reference)

    def _wrong(self, request: TurnRequest, _sampling: SamplingParams) -> str:
        item = _item(request, "wrong")
        if _is_review(request):
            return "WRONG" if self._pending_correct(request, item) else "RIGHT"
        return format_answer(wrong_answer(item.reference))

    def _contrarian(self, request: TurnRequest, _sampling: SamplingParams) -> str:
        item = _item(request, "contrarian")
        if _is_review(request):
            return "WRONG"
        return format_answer(wrong_answer(item.reference))

    def _echo(self, request: TurnRequest, _sampling: SamplingParams) -> str:
        chat = request.chat
        return chat[-2].content if len(chat) >= 2 else (chat[-1].content if chat else "")

    def _random(self, request: TurnRequest, sampling: SamplingParams) -> str:
        key = (f"{self.seed}/{sampling.seed}/{request.seed}/{request.item.id if request.item else ''}/"
               f"{request.agent}/{request.stage}/{request.round}")
        rng = random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little"))
        return "".join(rng.choice(_RANDOM_ALPHABET) for _ in range(rng.randint(0, 200)))

    def _pending_correct(self, request: TurnRequest, item: TaskItem) -> bool:
        pending = request.metadata.get("pending_answer")
        return pending is not None and bool(self.is_correct(str(pending), item))


def _is_review(request: TurnRequest) -> bool:
    return request.expects == "verdict"


def _item(request: TurnRequest, policy: str) -> TaskItem:
    if request.item is None:
        raise ConfigError(f"scripted policy {policy!r} needs TurnRequest.item (the reference) for the turn "
                          f"of {request.agent}; the env sets it")
    return request.item


#: built-in policies by name
POLICIES: dict[str, Callable[[ScriptedBackend, TurnRequest, SamplingParams], str]] = {
    "oracle": ScriptedBackend._oracle,
    "wrong": ScriptedBackend._wrong,
    "contrarian": ScriptedBackend._contrarian,
    "echo": ScriptedBackend._echo,
    "random": ScriptedBackend._random,
}
