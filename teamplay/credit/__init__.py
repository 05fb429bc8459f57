"""Credit assignment: from one team reward to one advantage per message.

Importing this package registers the built-in methods; ``credit_methods()`` lists them and
``assign(name, batch, options)`` runs one. See ``registry.py`` for the one signature they share.

Rooms, imports running down: ``values/`` (group normalisation, Shapley values, characteristic
functions, coverage, process scores, replay queries), then ``registry.py``, then ``methods/`` (the
message-level methods) and ``token/`` (the token-level ones), then ``audit/`` (cards, fidelity,
the COSAC bandit), which checks the methods.
"""

from teamplay.credit import methods, token  # noqa: F401  (registration)
from teamplay.credit.registry import (
    CREDIT,
    CardText,
    CreditBatch,
    CreditMethod,
    CreditOutputError,
    CreditResources,
    assign,
    check_credit,
    credit_methods,
    get_credit,
    register_credit,
)

__all__ = ["CREDIT", "CardText", "CreditBatch", "CreditMethod", "CreditOutputError", "CreditResources", "assign",
           "check_credit", "credit_methods", "get_credit", "register_credit"]
