"""The registered message-level credit methods, one module per family.

Importing this package registers them: ``dr_mas`` and ``raft`` (``broadcast``), ``grpo``, ``gspo``,
``shapley``, ``shapley_prm``, ``shape_max`` and ``coverage`` (``group_shapley``), ``oracle``,
``cal_grpo``, ``continuation``, ``influence``, ``cosac``, ``tracer_roles`` (``regret``) and ``gigpo``, ``a2tgpo``,
``loto`` (``turn_baselines``). Each has the one signature of ``teamplay.credit.registry``; the values they share are in
``teamplay.credit.values``.
"""

from teamplay.credit.methods import (  # noqa: F401  (registration)
    broadcast,
    cal_grpo,
    continuation,
    cosac,
    group_shapley,
    influence,
    oracle,
    regret,
    turn_baselines,
)
