"""Team protocols: who speaks when, who sees what, how the final answer is chosen.

Built-ins (one module each): ``single``, ``vote``, ``proposer_reviewer``, ``debate``,
``sequential``, ``split``, ``paths``, ``relay``, ``review``. User protocols: a YAML file
(``yaml_protocol``) or a Python file
defining one ``Protocol`` subclass, both loaded by path through ``get_protocol``.
"""

from teamplay.envs.protocols import (  # noqa: F401  (registers)
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
from teamplay.envs.protocols.proposer_reviewer import parse_verdict
from teamplay.envs.protocols.registry import get_protocol, protocol_names, register_protocol

__all__ = [
    "Controller", "Protocol", "ProtocolOptions", "ProtocolState", "RoleSpec", "SkippableOptions",
    "TurnDecision", "TurnSpec", "get_protocol", "parse_verdict", "protocol_names", "register_protocol",
]
