"""The run shell: the trainer (``trainer``) composed from a Runner and a Learner (``parts``), the
step's update stage that drives the learner (``update_stage``), what a run carries from step to
step (``run_state``), the data order (``data_order``), stopping at a signal (``preemption``) and the
held-out evaluations (``held_out``).

Above ``step`` and every room below it; only ``experiments`` imports it.
"""
