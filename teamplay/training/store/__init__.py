"""What a run keeps on disk: checkpoints (``checkpoint``), which one to resume (``resume``), the run
folder's claim and clean-up (``run_folder``) and the metrics file (``metrics``).

The bottom floor of ``teamplay.training`` with ``learn`` and ``play``: it imports no other room.
"""
