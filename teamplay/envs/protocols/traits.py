"""Protocol traits: what a protocol promises about its episodes, the facts credit methods ask for.

A protocol declares its traits as a class attribute (``traits = frozenset({"chain", "verdicts"})``;
a YAML protocol as a ``traits:`` list); a credit method registers the traits it needs
(``register_credit(..., traits=...)``) and a run whose protocol does not declare one of them is
refused before a model loads, in one line naming the trait. No method tests a protocol's name, so a
user's protocol that declares a trait gets every method that needs it. What a given protocol
declares, and which registered protocols declare a trait: ``traits_of`` and ``protocols_with`` of
``teamplay.envs.protocols.registry``.

Each description completes "a protocol where ...". The set is what the credit methods need, no more:

>>> sorted(TRAITS)[:3]
['adopting_review', 'chain', 'every_agent_answers']
>>> check_traits(["chain"], "protocol 'mine'")
frozenset({'chain'})
"""

from __future__ import annotations

from collections.abc import Iterable
from types import MappingProxyType

from teamplay.errors import ConfigError, did_you_mean

#: trait name -> what it promises (completes "a protocol where ...")
TRAITS = MappingProxyType({
    "every_agent_answers": "every agent answers the team's whole problem (none only reviews, informs, "
                           "judges or solves a part)",
    "revises": "an agent answers again after reading feedback on its answer (re-proposals after a review, "
               "debate rounds)",
    "chain": "turns come one at a time in one fixed order and later turns read the earlier messages",
    "verdicts": "every turn is a proposal (stage propose) or a review (stage review) that judges the pending "
                "proposal RIGHT or WRONG",
    "last_link_final": "agents answer in a chain and the team's answer is the last link's",
    "scored_parts": "each agent answers its own part of the problem and the team reward is the mean or the "
                    "product of the parts' scores",
    "informants": "informants each state a hidden piece and one answerer combines them; the team reward is "
                  "the answerer's score",
    "independent_vote": "solvers answer alone and the team's answer is their vote",
    "adopting_review": "one proposal, then one review whose corrected answer the team adopts",
})


def check_traits(names: Iterable[str], where: str) -> frozenset[str]:
    """``names`` as a frozenset once each is a known trait; else one ``ConfigError`` line naming
    ``where``, the unknown name, the closest known one and the known ones."""
    if isinstance(names, str):
        raise ConfigError(f"{where}: traits must be a list of names, got the string {names!r}")
    out = frozenset(names)
    for name in sorted(out):
        if name not in TRAITS:
            raise ConfigError(f"{where}: unknown trait {name!r}{did_you_mean(str(name), list(TRAITS))} "
                              f"(known: {', '.join(sorted(TRAITS))})")
    return out


def describe(trait: str) -> str:
    """What ``trait`` promises (its description in ``TRAITS``)."""
    return TRAITS[trait]
