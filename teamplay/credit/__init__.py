"""Credit assignment: from one team reward to one advantage per message.

Importing this package registers the built-in methods; ``credit_methods()`` lists them and
``assign(name, batch, options)`` runs one. See ``registry.py`` for the one signature they share.
"""

from teamplay.credit import cal_grpo, continuation, cosac, methods, oracle, regret, token, turn_baselines  # noqa: F401  (registration)
from teamplay.credit.registry import (
    CREDIT,
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

__all__ = ["CREDIT", "CreditBatch", "CreditMethod", "CreditOutputError", "CreditResources", "assign", "check_credit",
           "credit_methods", "get_credit", "register_credit"]
