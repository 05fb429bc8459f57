"""The registered message-level credit methods, one module per method, named after it.

Importing this package registers them. A method's module holds its options model, its function (the
one signature of ``teamplay.credit.registry``), its card (``card=`` where it registers) and nothing
else it alone does not need; ``grpo.py`` also holds ``gspo`` (the same advantages, for GSPO's
objective). Pieces several methods share have modules of their own: ``group_baseline`` (the group
baseline's options, the broadcast to messages) and ``assumptions`` (sentences several cards state);
the values they compute from are in ``teamplay.credit.values``.

Modules still holding a family: ``broadcast`` (``dr_mas``, ``raft``), ``regret`` (``tracer_roles``,
beside the controllers' regret matcher) and ``turn_baselines`` (``gigpo``, ``a2tgpo``, ``loto``).
"""

from teamplay.credit.methods import (  # noqa: F401  (registration)
    broadcast,
    cal_grpo,
    continuation,
    cosac,
    coverage,
    grpo,
    influence,
    oracle,
    regret,
    shape_max,
    shapley,
    shapley_prm,
    turn_baselines,
)
