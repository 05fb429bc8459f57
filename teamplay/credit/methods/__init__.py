"""The registered message-level credit methods, one module per method, named after it.

Importing this package registers them. A method's module holds its options model, its function (the
one signature of ``teamplay.credit.registry``) and its card (``card=`` where it registers); ``grpo.py``
also holds ``gspo`` (the same advantages, for GSPO's objective). A new built-in method is one more
module here, imported below, and its test (docs/how-to/credit-method.md).

What several methods share has a module of its own: ``group_baseline`` (the group baseline's
options, the broadcast of per-agent values to messages), ``assumptions`` (sentences several cards
state), ``turn_arrays`` (the ragged per-turn arrays of ``gigpo``, ``a2tgpo`` and ``loto``),
``oracle_baseline`` (``oracle``'s replayed baseline); ``tracer_roles`` holds TRACER's role rewards,
which the speak/skip controllers' regret matching (``teamplay.training.play.regret``) learns from too.
The values the methods compute from are in ``teamplay.credit.values``.
"""

from teamplay.credit.methods import (  # noqa: F401  (registration)
    a2tgpo,
    cal_grpo,
    continuation,
    cosac,
    coverage,
    dr_mas,
    gigpo,
    grpo,
    influence,
    loto,
    oracle,
    raft,
    shape_max,
    shapley,
    shapley_prm,
    tracer_roles,
)
