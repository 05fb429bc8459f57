"""Deterministic text policies for tests and demos: no model, no tokens.

A scripted policy maps one ``TurnRequest`` to a text. Built-in policies:

- ``truthful``: states the reference (``"The answer is \\boxed{REF}."``); on a review turn says
  ``"RIGHT"`` when the answer under review is correct and ``"WRONG"`` otherwise. Its old name
  ``oracle`` (now the credit method's alone) is read for one release with a warning
  (``canonical_policy``).
- ``wrong``: states a wrong answer (``wrong_answer``); on a review turn gives the wrong verdict
  (``"WRONG"`` for a correct answer, ``"RIGHT"`` for a wrong one).
- ``contrarian``: states a wrong answer; on a review turn always says ``"WRONG"``.
- ``echo``: repeats the newest message before the instruction (the newest transcript entry, or
  the problem when there is none).
- ``random``: seeded random text (printable unicode, digits, LaTeX-ish symbols; 0-200 characters);
  the same (backend seed, sampling seed, episode seed, item, agent, stage, round) gives the same
  text, so the episodes of a group differ.
- ``noisy_proposer(p_right=0.5)``: a proposer that is right with probability ``p_right`` on its
  first proposal and *complies* with the review afterwards: after a WRONG verdict it switches
  (a right pending answer becomes a wrong one, a wrong one becomes the reference), otherwise it
  restates the pending answer. With it, the team's final answer is right exactly when the review
  was right, which makes the credit of a review known (the controlled credit arena). The coin of
  request ``i`` of a ``generate`` call is drawn from (backend seed, sampling seed, ``i``, item,
  agent, round), so greedy evaluations see the same proposals before and after training. On a
  review turn it behaves as ``truthful``. Its wrong first proposal is ``wrong_answer`` (the reference
  plus one) by default; with ``spread=k`` (an integer 1-100) a numeric reference is instead off by a
  nonzero integer drawn uniformly from -k..k (seeded like the coin), so a reviewer cannot fix it by
  undoing one known offset.
- ``noisy_teammate(q=0.5)``: a teammate that acts after an answer was given (a chain's later link):
  with probability ``q`` it replaces the running answer (``metadata["pending_answer"]``) with a
  wrong one, otherwise it restates the running answer (no answer when there was none). Its coin is
  independent of everything before it, so after the running answer ``a`` the team is right with
  probability exactly ``(1 - q) * correct(a)`` (the credit-fidelity benchmark's closed form).
- ``noisy_reviewer(p_right=0.8)``: on a review turn the right verdict with probability ``p_right``
  and the wrong one otherwise (a helpful reviewer for ``p_right`` above 0.5, a harmful one below);
  on any other turn it behaves as ``truthful``.
- ``approver``: a free-riding reviewer: every review says RIGHT whatever it reviews; on any other
  turn it restates the running answer (no answer when there was none).
- ``copier(agent=NAME)``: a free-riding path: restates, as a bare answer sentence without any work,
  the latest answer it can see in its transcript, from ``agent``'s messages (default: any other
  agent's); ``"I have no answer."`` when it sees none, so in a simultaneous round (``vote``) it
  answers nothing. Every review says RIGHT.
- ``silent``: a path that answers nothing: ``"I have nothing to add."`` on every turn (no answer, no
  verdict).
- ``adder``: an honest relay member that never states a reference it was not handed as its piece:
  given an item that is one operand of a problem (``metadata["operand_index"]``, what ``relay``
  gives each informant) it states that operand; otherwise it states the sum of the other agents'
  latest answers in its transcript that read as numbers (``"I have no answer."`` when there are
  none). So a relay team of adders is right exactly when every operand reached the answerer.

A policy with options is written ``name(key=value, ...)`` (``noisy_proposer(p_right=0.3)``), values
as YAML scalars; ``parse_policy`` reads that form and ``POLICY_OPTIONS`` lists what each accepts.

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
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import yaml

from teamplay.agents.backends.base import GenerationBackend
from teamplay.errors import ConfigError, warn_renamed
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


_SPEC = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(?:\((.*)\))?\s*$", re.DOTALL)


def canonical_policy(spec: str) -> str:
    """``spec`` with a renamed policy's old name (``RENAMED_POLICIES``) replaced by its new one,
    warning once (``teamplay.errors.warn_renamed``); any other spec as it is. Config sections store
    what this returns, so a config warns once however often its policies are parsed again.

    >>> canonical_policy("noisy_proposer(p_right=0.25)")
    'noisy_proposer(p_right=0.25)'
    """
    match = _SPEC.match(spec)
    if match is None or match.group(1) not in RENAMED_POLICIES:
        return spec
    old, new = match.group(1), RENAMED_POLICIES[match.group(1)]
    warn_renamed(f"scripted policy {old!r}", f"scripted policy {new!r}")
    return spec[:match.start(1)] + new + spec[match.end(1):]


def parse_policy(spec: str) -> tuple[str, dict[str, Any]]:
    """``"noisy_proposer(p_right=0.3)"`` -> ``("noisy_proposer", {"p_right": 0.3})``; checks the name
    and the option names and values.

    >>> parse_policy("truthful"), parse_policy("noisy_proposer(p_right=0.25)")
    (('truthful', {}), ('noisy_proposer', {'p_right': 0.25}))
    """
    match = _SPEC.match(canonical_policy(spec))
    if match is None:
        raise ConfigError(f"scripted policy {spec!r}: expected NAME or NAME(key=value, ...)")
    name, args = match.group(1), match.group(2)
    if name not in POLICIES:
        raise ConfigError(f"unknown scripted policy {name!r}; known: {sorted(POLICIES)}")
    options: dict[str, Any] = {}
    for part in (args or "").split(","):
        if not part.strip():
            continue
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or key not in POLICY_OPTIONS.get(name, {}):
            allowed = sorted(POLICY_OPTIONS.get(name, {})) or "none"
            raise ConfigError(f"scripted policy {spec!r}: unknown option {key!r}; {name} takes {allowed}")
        try:
            options[key] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise ConfigError(f"scripted policy {spec!r}: option {key} has a malformed value {raw!r}") from None
    for key, check in POLICY_OPTIONS.get(name, {}).items():
        if key in options and not check(options[key]):
            raise ConfigError(f"scripted policy {spec!r}: {key}={options[key]!r} is out of range")
    return name, options


class ScriptedBackend(GenerationBackend):
    """Answers every request with a scripted policy.

    Args:
        policy: a built-in policy name (``POLICIES``), a spec with options
            (``"noisy_proposer(p_right=0.3)"``, see ``parse_policy``) or a callable ``fn(request) -> str``.
        seed: seed of the ``random`` and ``noisy_proposer`` policies.
        is_correct: correctness of a pending answer for review verdicts (default ``same_answer``).

    Generations carry text only (no token ids or log-probs) and the request's adapter.
    """

    name = "scripted"

    def __init__(self, policy: str | Policy = "truthful", seed: int = 0,
                 is_correct: Judge = same_answer) -> None:
        self.seed = seed
        self.is_correct = is_correct
        self.options: Mapping[str, Any] = {}
        if callable(policy):
            self._policy: Callable[[TurnRequest, SamplingParams], str] = lambda r, _s: policy(r)
            self.policy_name = getattr(policy, "__name__", "custom")
            return
        try:
            name, self.options = parse_policy(policy)
        except ConfigError as exc:
            raise ConfigError(f"backend.policy: {exc}; or pass a callable fn(request) -> str") from None
        method = POLICIES[name]
        self._policy = lambda r, s: method(self, r, s)
        self.policy_name = name
        self._position = 0

    def generate(self, requests: Sequence[TurnRequest], sampling: SamplingParams,
                 positions: Sequence[int] | None = None) -> list[Generation]:
        """One text per request. ``positions`` (default 0..n-1) are the requests' places in the
        caller's batch; seeded policies key their randomness on them (see ``MixedBackend``)."""
        out = []
        for i, r in enumerate(requests):
            self._position = positions[i] if positions is not None else i
            out.append(Generation(text=self._policy(r, sampling), adapter=r.adapter))
        return out

    # ------------------------------------------------------------------ policies
    def _truthful(self, request: TurnRequest, _sampling: SamplingParams) -> str:
        item = _item(request, "truthful")
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

    def _noisy_proposer(self, request: TurnRequest, sampling: SamplingParams) -> str:
        item = _item(request, "noisy_proposer")
        if _is_review(request):
            return self._truthful(request, sampling)
        pending = request.metadata.get("pending_answer")
        if pending is None:  # first proposal: right with probability p_right
            right = self._coin(request, sampling, item) < float(self.options.get("p_right", 0.5))
            return format_answer(item.reference if right else self._off_answer(request, sampling, item))
        if request.metadata.get("last_verdict") == "WRONG":  # comply: switch
            correct = self._pending_correct(request, item)
            return format_answer(wrong_answer(item.reference) if correct else item.reference)
        return format_answer(str(pending))

    def _noisy_teammate(self, request: TurnRequest, sampling: SamplingParams) -> str:
        item = _item(request, "noisy_teammate")
        if _is_review(request):
            return self._truthful(request, sampling)
        if self._coin(request, sampling, item) < float(self.options.get("q", 0.5)):
            return format_answer(wrong_answer(item.reference))
        return _restate(request)

    def _noisy_reviewer(self, request: TurnRequest, sampling: SamplingParams) -> str:
        item = _item(request, "noisy_reviewer")
        if not _is_review(request):
            return self._truthful(request, sampling)
        right = self._coin(request, sampling, item) < float(self.options.get("p_right", 0.8))
        return "RIGHT" if self._pending_correct(request, item) == right else "WRONG"

    def _approver(self, request: TurnRequest, _sampling: SamplingParams) -> str:
        return "RIGHT" if _is_review(request) else _restate(request)

    def _copier(self, request: TurnRequest, _sampling: SamplingParams) -> str:
        if _is_review(request):
            return "RIGHT"
        source = self.options.get("agent")
        for m in reversed(request.transcript):
            if m.agent != request.agent and source in (None, m.agent) and m.spoke and m.answer is not None:
                return format_answer(m.answer)
        return "I have no answer."

    def _silent(self, _request: TurnRequest, _sampling: SamplingParams) -> str:
        return "I have nothing to add."

    def _adder(self, request: TurnRequest, _sampling: SamplingParams) -> str:
        item = _item(request, "adder")
        if "operand_index" in item.metadata:
            return format_answer(item.reference)
        latest = {m.agent: m.answer for m in request.transcript
                  if m.agent != request.agent and m.spoke and m.answer is not None}
        numbers = [n for a in latest.values() if (n := _number(a.strip())) is not None]
        return format_answer(str(sum(numbers))) if numbers else "I have no answer."

    def _off_answer(self, request: TurnRequest, sampling: SamplingParams, item: TaskItem) -> str:
        """A wrong answer: ``wrong_answer``, or with the ``spread`` option a numeric reference off by
        a nonzero integer in -spread..spread (its own seeded draw, independent of the coin)."""
        spread, number = self.options.get("spread"), _number(item.reference.strip())
        if spread is None or number is None:
            return wrong_answer(item.reference)
        offset = 1 + int(self._coin(request, sampling, item, "offset") * 2 * spread)  # 1..2 spread
        return str(number + (offset if offset <= spread else spread - offset))

    def _coin(self, request: TurnRequest, sampling: SamplingParams, item: TaskItem, purpose: str = "") -> float:
        """A uniform draw in [0, 1) for this request, from (backend seed, sampling seed, position
        in the call, item, agent, round, and ``purpose`` when a policy needs a second draw):
        independent of the transcript, repeatable."""
        key = f"{self.seed}/{sampling.seed}/{self._position}/{item.id}/{request.agent}/{request.round}"
        key += f"/{purpose}" if purpose else ""
        return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")).random()

    def _pending_correct(self, request: TurnRequest, item: TaskItem) -> bool:
        pending = request.metadata.get("pending_answer")
        return pending is not None and bool(self.is_correct(str(pending), item))


def _is_review(request: TurnRequest) -> bool:
    return request.expects == "verdict"


def _restate(request: TurnRequest) -> str:
    """The running answer restated, or a sentence without an answer when there is none."""
    pending = request.metadata.get("pending_answer")
    return format_answer(str(pending)) if pending is not None else "I have no answer."


def _item(request: TurnRequest, policy: str) -> TaskItem:
    if request.item is None:
        raise ConfigError(f"scripted policy {policy!r} needs TurnRequest.item (the reference) for the turn "
                          f"of {request.agent}; the env sets it")
    return request.item


#: built-in policies by name
POLICIES: dict[str, Callable[[ScriptedBackend, TurnRequest, SamplingParams], str]] = {
    "truthful": ScriptedBackend._truthful,
    "wrong": ScriptedBackend._wrong,
    "contrarian": ScriptedBackend._contrarian,
    "echo": ScriptedBackend._echo,
    "random": ScriptedBackend._random,
    "noisy_proposer": ScriptedBackend._noisy_proposer,
    "noisy_teammate": ScriptedBackend._noisy_teammate,
    "noisy_reviewer": ScriptedBackend._noisy_reviewer,
    "approver": ScriptedBackend._approver,
    "copier": ScriptedBackend._copier,
    "silent": ScriptedBackend._silent,
    "adder": ScriptedBackend._adder,
}

#: old policy name -> its new name, read with one warning line for one release
RENAMED_POLICIES: dict[str, str] = {"oracle": "truthful"}

#: options each policy accepts, with a check of the value
def _probability(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0


def _spread(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 100


def _agent_name(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


POLICY_OPTIONS: dict[str, dict[str, Callable[[Any], bool]]] = {
    "noisy_proposer": {"p_right": _probability, "spread": _spread},
    "noisy_teammate": {"q": _probability},
    "noisy_reviewer": {"p_right": _probability},
    "copier": {"agent": _agent_name},
}
