"""The teacher of each built-in protocol's roles: the scripted policy whose messages a warm start
(``warm_start: {source: teacher}``, ``teamplay sft``) fine-tunes that role's adapter on.

A teacher plays its role the way the protocol means it to be played, so a team of teachers earns
the reward a cold 135M model never does: relay's informants and answerer are ``adder`` (an
informant states its operand, the answerer sums what it reads), a reviewer is ``truthful`` (a
faithful verdict: RIGHT exactly when the answer under review is right) beside a ``noisy_proposer``
that is right half the time (so the reviewer's teacher says WRONG as often as RIGHT), and solvers,
voters, debaters and chain members are ``truthful`` (they state the reference answer). Policies are
``teamplay.agents.backends.scripted``'s.

A role absent from the table (paths' ``judge``, every role of a user's protocol) has no teacher;
``warm_start.teachers`` names one (``{judge: truthful}``), or the role is left out of
``warm_start.roles``. A protocol whose roles are named by the team (``split``, ``sequential``) maps
every role (``"*"``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

#: protocol name -> role name (``"*"``: any role) -> scripted policy spec
TEACHERS: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "single": {"solver": "truthful"},
    "vote": {"solver": "truthful"},
    "debate": {"debater": "truthful"},
    "sequential": {"*": "truthful"},
    "split": {"*": "truthful"},
    "paths": {"path": "truthful"},
    "relay": {"informant": "adder", "answerer": "adder"},
    "review": {"proposer": "noisy_proposer", "reviewer": "truthful"},
    "proposer_reviewer": {"proposer": "noisy_proposer", "reviewer": "truthful"},
})


def teacher_of(protocol: str, role: str, given: Mapping[str, str] | None = None) -> str | None:
    """The teacher policy spec of ``role`` in ``protocol``: ``given[role]`` (the config's
    ``warm_start.teachers``) first, then the protocol's table; None when there is none.

    >>> teacher_of("relay", "answerer"), teacher_of("split", "solver_2"), teacher_of("paths", "judge")
    ('adder', 'truthful', None)
    >>> teacher_of("paths", "judge", {"judge": "truthful"})
    'truthful'
    """
    if given and role in given:
        return given[role]
    table = TEACHERS.get(protocol, {})
    return table.get(role, table.get("*"))


def roles_without_teacher(protocol: str, roles: Iterable[str], given: Mapping[str, str] | None = None) -> list[str]:
    """The roles of ``roles`` that have no teacher in ``protocol`` (in order).

    >>> roles_without_teacher("paths", ["path", "judge"])
    ['judge']
    """
    return [role for role in roles if teacher_of(protocol, role, given) is None]
