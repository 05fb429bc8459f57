"""Team protocols: who speaks when, who sees what, how the final answer is chosen.

=================  ===========================================================================
name               rule book (one module of ``catalog/`` each)
=================  ===========================================================================
single             one solver answers once
vote               N independent solvers, plurality (or strict majority) of their answers
proposer_reviewer  TRACER: proposal and RIGHT/WRONG review rounds alternate
debate             N debaters answer, then read each other's latest answers for R rounds
sequential         a chain: each agent sees its predecessors, the last answer is the team's
split              K solvers, one sub-problem each (an additive or conjunctive team)
paths              K reasoning paths, then a judge that reads them all
relay              informants hold hidden operands, an answerer combines them
review             one proposal, one review whose corrected answer the team adopts
=================  ===========================================================================

The machinery they share sits beside ``catalog/``: the interface (``base``), the episode loop
(``driver``), the registry (``registry``), YAML protocols (``yaml_protocol``), what a protocol
promises to credit methods (``traits``) and a reviewer's verdict (``verdicts``). A new built-in
protocol is one module in ``catalog/`` with a ``Protocol`` subclass decorated with
``@register_protocol`` and imported here; a user's own protocol needs no registration: a YAML file or
a Python file defining one ``Protocol`` subclass, both named by path (``get_protocol``).
"""

from teamplay.envs.protocols.base import (
    Controller,
    Protocol,
    ProtocolOptions,
    ProtocolState,
    RoleSpec,
    SkippableOptions,
    TurnDecision,
    TurnSpec,
)
from teamplay.envs.protocols.catalog import (  # noqa: F401  (registers)
    debate,
    paths,
    proposer_reviewer,
    relay,
    review,
    sequential,
    single,
    split,
    vote,
)
from teamplay.envs.protocols.registry import get_protocol, protocol_names, register_protocol
from teamplay.envs.protocols.verdicts import parse_verdict

__all__ = [
    "Controller", "Protocol", "ProtocolOptions", "ProtocolState", "RoleSpec", "SkippableOptions",
    "TurnDecision", "TurnSpec", "get_protocol", "parse_verdict", "protocol_names", "register_protocol",
]
