"""What runs beside the trainer: sweeps of runs (``sweep``), a credit method tried on saved episodes
without training (``saved_credit``), training the speak/skip controllers alone
(``controller_training``) and methods checked against the true advantage (``fidelity_check``,
``teamplay credit --check``).

The top room of ``teamplay.training``: it may import every other room, none imports it.
"""
