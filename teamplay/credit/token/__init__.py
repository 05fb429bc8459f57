"""Token-level credit: methods that spread a message's advantage over its tokens (one module each).

Importing this package registers the built-in token methods; see ``base.py`` for the contract.
"""

from teamplay.credit.token import aem, dgpo, ep_grpo, gear, s_trace, vpr  # noqa: F401  (registration)
from teamplay.credit.token.base import (
    GroupTokenStats,
    TokenMethod,
    TokenStats,
    assign_tokens,
    get_token_credit,
    register_token_credit,
    token_methods,
)

__all__ = ["GroupTokenStats", "TokenMethod", "TokenStats", "assign_tokens", "get_token_credit",
           "register_token_credit", "token_methods"]
