"""Identification cards of the credit methods: what each one estimates, when, at what cost, and
which test would catch it lying (``teamplay credit --card METHOD``).

A card answers four questions about a registered method (the "CA-ID card" the survey of credit
assignment in agentic RL proposes):

1. **estimand**: the quantity its advantage estimates;
2. **assumptions**: what must hold for that quantity to be the causal contrast a reader takes it
   for (or, for methods that are heuristics, that it is one);
3. **cost**: what it spends beyond the rollout (generated tokens, extra passes);
4. **falsified by**: the tests in this repository (``path::function``) that fail when the method
   does not compute its estimand; ``tests/credit/test_cards.py`` checks that every one exists.

Each method declares its card where it registers (``register_credit(..., card=CardText(...))``, beside
its code); this module only collects and renders them. For a message-level method the cost is what
it declares in the registry (``CreditMethod.cost``) followed by the card's note; token methods
declare no cost, so the note is all of it. A method registered without a card (a user's own) gets
one built from its registry entry that says no estimand was declared.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, replace
from pathlib import Path

from teamplay.credit.registry import CREDIT, CardText, CreditMethod, credit_methods
from teamplay.credit.token.base import TOKEN_CREDIT, TokenMethod, token_methods
from teamplay.errors import ConfigError
from teamplay.registry import is_plugin_spec

#: width of a rendered card (plain text, no terminal markup)
WIDTH = 100
_LABEL = 16  # column where a field's text starts


@dataclass(frozen=True)
class CreditCard:
    """One method's identification card.

    Fields:
        name: the method's name (or ``file.py:name`` for a user's file).
        level: ``"message"`` (``credit.method``) or ``"token"`` (``credit.token.method``).
        summary: the registry's one line.
        estimand: the quantity the advantage estimates.
        assumptions: what must hold for it to identify the causal contrast, one sentence each.
        cost: extra generated tokens and passes beyond the rollout.
        falsified_by: tests as ``path::function`` (paths relative to the repository root); empty
            for a method without a card.
        protocols: the registered protocols it works with under some options (None: any).
        traits: the protocol traits it needs whatever its options (``teamplay.envs.protocols.traits``).
        declared: False for a card built from a registry entry alone (no estimand declared).
        fails_where: what is wrong with it today and the measured cases where an assumption fails
            (BENCHMARKS.md section 12 is the fidelity table; section 11 the arena).
    """

    name: str
    level: str
    summary: str
    estimand: str
    assumptions: tuple[str, ...]
    cost: str
    falsified_by: tuple[str, ...]
    protocols: tuple[str, ...] | None = None
    declared: bool = True
    traits: tuple[str, ...] = ()
    fails_where: tuple[str, ...] = ()

    def render(self) -> str:
        """The card as plain text, wrapped at :data:`WIDTH` columns."""
        field = "credit.method" if self.level == "message" else "credit.token.method"
        lines = [textwrap.fill(f"{self.name}  ({self.level}-level, {field}): {self.summary}", WIDTH,
                               subsequent_indent="    ", break_on_hyphens=False)]
        lines += _wrapped("estimand", [self.estimand])
        lines += _wrapped("assumptions", [f"- {a}" for a in self.assumptions] or ["none declared"])
        lines += _wrapped("cost", [self.cost])
        lines += _wrapped("protocols", [protocols_line(self.protocols, self.traits)])
        lines += _wrapped("falsified by", list(self.falsified_by) or ["no test named"])
        if self.fails_where:
            lines += _wrapped("fails where", [f"- {f}" for f in self.fails_where])
        return "\n".join(lines)


def protocols_line(protocols: tuple[str, ...] | None, traits: tuple[str, ...]) -> str:
    """The protocols a card lists, with the traits that decide them.

    >>> protocols_line(("debate", "proposer_reviewer"), ("revises",))
    'debate, proposer_reviewer (those declaring the trait revises)'
    >>> protocols_line(None, ())
    'any'
    """
    if protocols is None:
        return "any"
    listed = ", ".join(protocols) or "none built in"
    if not traits:
        return f"{listed} (depending on its options)"
    return f"{listed} (those declaring the trait{'s' if len(traits) > 1 else ''} {', '.join(traits)})"


def _wrapped(label: str, paragraphs: list[str]) -> list[str]:
    """``label`` in the first column, each paragraph wrapped in the second (bullets hang)."""
    out = []
    for k, text in enumerate(paragraphs):
        first = f"  {label}".ljust(_LABEL) if k == 0 else " " * _LABEL
        hang = " " * (_LABEL + (2 if text.startswith("- ") else 0))
        out.append(textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=hang,
                                 break_on_hyphens=False, break_long_words=False))
    return out


def card_names() -> list[str]:
    """Every registered method, message-level first, then token-level (each sorted)."""
    return list(credit_methods()) + list(token_methods())


def card_for(name: str) -> CreditCard:
    """The card of method ``name`` (a registered name or a user file ``path/to/file.py:name``).

    Raises ConfigError for a name no registry knows; never for a method without a card.
    """
    entry = _entry(name)
    label = Path(name).name if is_plugin_spec(name) else name
    text = entry.card
    if isinstance(entry, CreditMethod):
        return _message_card(label, entry, text)
    return _token_card(label, entry, text)


def render_cards(name: str) -> str:
    """``card_for(name).render()``, or every card separated by blank lines for ``"all"``."""
    names = card_names() if name == "all" else [name]
    return "\n\n".join(card_for(n).render() for n in names)


def _entry(name: str) -> CreditMethod | TokenMethod:
    if is_plugin_spec(name):
        try:
            return CREDIT.get(name)
        except ConfigError as exc:
            try:
                return TOKEN_CREDIT.get(name)
            except ConfigError:
                raise exc from None
    for registry in (CREDIT, TOKEN_CREDIT):
        if name in registry.names():
            return registry.get(name)
    raise ConfigError(f"credit --card: unknown credit method {name!r}; known: {', '.join(card_names())}, "
                      f"or all; or a user file as path/to/file.py:name")


def _message_card(name: str, method: CreditMethod, text: CardText | None) -> CreditCard:
    protocols, traits = method.fitting_protocols(), tuple(sorted(method.traits))
    if text is None:
        return replace(_undeclared(name, "message", method.summary, method.cost, protocols), traits=traits)
    cost = f"{method.cost}; {text.cost}" if text.cost else method.cost
    return CreditCard(name, "message", method.summary, text.estimand, text.assumptions, cost,
                      text.falsified_by, protocols, fails_where=text.fails_where, traits=traits)


def _token_card(name: str, method: TokenMethod, text: CardText | None) -> CreditCard:
    if text is None:
        needs = ", ".join(sorted(method.needs)) or "behaviour log-probs only"
        return _undeclared(name, "token", method.summary, f"not declared (needs: {needs})", None)
    return CreditCard(name, "token", method.summary, text.estimand, text.assumptions, text.cost,
                      text.falsified_by, fails_where=text.fails_where)


def _undeclared(name: str, level: str, summary: str, cost: str, protocols: tuple[str, ...] | None
                ) -> CreditCard:
    return CreditCard(name, level, summary,
                      "not declared: this method has no card, so what its advantage estimates is "
                      "unknown (only its registry summary is above)",
                      (), cost, (), protocols, declared=False)


__all__ = ["CreditCard", "card_for", "card_names", "render_cards"]
